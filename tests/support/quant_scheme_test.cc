#include "support/quant_scheme.h"

#include <gtest/gtest.h>

#include <string>

#include <fmt/ranges.h>

namespace pgq {
namespace {

TEST(QuantScheme, NamesRoundTripInListOrder) {
  EXPECT_EQ(fmt::format("{}", fmt::join(kFormatFamilies, ", ")), "int8, fp8, mxfp8, mxint8, moss_fp8, nvfp4, mxfp4, bf16");
  EXPECT_EQ(fmt::format("{}", fmt::join(kFormatSchemes, ", ")),
            "int8, fp8, fp8_e4m3, mxfp8, mxint8, moss_fp8, nvfp4, mxfp4, bf16");
  for (FormatFamily family : kFormatFamilies) EXPECT_EQ(parseFormatFamily(nameOf(family)), family);
  for (Scheme scheme : kFormatSchemes) EXPECT_EQ(parseScheme(nameOf(scheme)), scheme);
  EXPECT_FALSE(parseFormatFamily("fp4"));
  EXPECT_FALSE(parseScheme("fp8_e5m2"));
  EXPECT_FALSE(parseFormatFamily("fp8_e4m3"));  // a scheme, not a family
}

TEST(QuantScheme, FamilyOfAFormat) {
  EXPECT_EQ(formatFamily(QuantFormat::parse("int7:channel:sr")), FormatFamily::kInt8);
  EXPECT_EQ(formatFamily(QuantFormat::parse("e4m3:tensor:rtn")), FormatFamily::kFp8);
  EXPECT_EQ(formatFamily(QuantFormat::parse("mxfp8_e5m2")), FormatFamily::kMxfp8);
  EXPECT_EQ(formatFamily(QuantFormat::parse("mxint8")), FormatFamily::kMxint8);
  EXPECT_EQ(formatFamily(QuantFormat::parse("e4m3:block32:rtn:scale=two_level")), FormatFamily::kMossFp8);
  EXPECT_EQ(formatFamily(QuantFormat::parse("nvfp4")), FormatFamily::kNvfp4);
  EXPECT_EQ(formatFamily(QuantFormat::parse("e2m1:block16x16:rtn:scale=e4m3:rht")), FormatFamily::kNvfp4);
  EXPECT_EQ(formatFamily(QuantFormat::parse("mxfp4")), FormatFamily::kMxfp4);
  EXPECT_EQ(formatFamily(QuantFormat::parse("bf16:tensor:sr")), FormatFamily::kBf16);
}

// Each scheme's formats by role, with the roundings given; a scheme's formats are of its
// family.
TEST(QuantScheme, FormatsOfEachScheme) {
  auto text = [](Scheme s, Rounding r, Rounding g) {
    SchemeFormats f = schemeFormats(s, r, g);
    return f.operand.toString() + " " + f.gradient.toString();
  };
  const Rounding rtn = Rounding::kNearest, sr = Rounding::kStochastic;
  EXPECT_EQ(text(Scheme::kInt8, rtn, rtn), "int8:channel:rtn int8:channel:rtn");
  EXPECT_EQ(text(Scheme::kFp8, rtn, sr), "e4m3:tensor:rtn e5m2:tensor:sr");
  EXPECT_EQ(text(Scheme::kFp8E4m3, rtn, rtn), "e4m3:tensor:rtn e4m3:tensor:rtn");
  EXPECT_EQ(text(Scheme::kMxfp8, sr, rtn), "e4m3:block32:sr:scale=e8m0 e4m3:block32:rtn:scale=e8m0");
  EXPECT_EQ(text(Scheme::kMxint8, rtn, sr), "int8:block32:rtn:scale=e8m0 int8:block32:sr:scale=e8m0");
  EXPECT_EQ(text(Scheme::kMossFp8, rtn, sr), "e4m3:block32:rtn:scale=two_level e5m2:block32:sr:scale=two_level");
  EXPECT_EQ(text(Scheme::kNvfp4, rtn, sr), "e2m1:block16:rtn:scale=e4m3 e2m1:block16:sr:scale=e4m3");
  EXPECT_EQ(text(Scheme::kMxfp4, rtn, sr), "e2m1:block32:rtn:scale=e8m0 e2m1:block32:sr:scale=e8m0");
  // bf16 rounds to nearest whatever the policy says, as autocast converts.
  EXPECT_EQ(text(Scheme::kBf16, sr, sr), "bf16:tensor:rtn bf16:tensor:rtn");
  // NVFP4's weights take 16x16 tiles, the others' weights their operand format.
  EXPECT_EQ(schemeFormats(Scheme::kNvfp4, rtn, sr).weight.toString(), "e2m1:block16x16:rtn:scale=e4m3");
  EXPECT_EQ(schemeFormats(Scheme::kMxfp8, rtn, sr).weight, schemeFormats(Scheme::kMxfp8, rtn, sr).operand);
  for (Scheme scheme : kFormatSchemes) {
    SchemeFormats f = schemeFormats(scheme, rtn, sr);
    EXPECT_NO_THROW(f.operand.validate());
    EXPECT_NO_THROW(f.gradient.validate());
    EXPECT_NO_THROW(f.weight.validate());
    EXPECT_EQ(formatFamily(f.weight), familyOf(scheme)) << nameOf(scheme);
    EXPECT_EQ(formatFamily(f.operand), familyOf(scheme)) << nameOf(scheme);
    EXPECT_EQ(formatFamily(f.gradient), familyOf(scheme)) << nameOf(scheme);
  }
  EXPECT_EQ(familyOf(Scheme::kFp8E4m3), FormatFamily::kFp8);
}

}  // namespace
}  // namespace pgq
