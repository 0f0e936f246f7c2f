#include <gtest/gtest.h>

#include "plan/profile_request.h"
#include "support/errors.h"

namespace pgq {
namespace {

QuantFormat f(const char* text) { return QuantFormat::parse(text); }

// A CPU whose int8 GEMM runs 8-bit operands on both sides (VNNI), or 8 bits on one side
// and 7 on the other (without VNNI an 8 x 8-bit product saturates).
HardwareModel cpu(bool vnni) {
  HardwareModel h;
  h.vnni = vnni;
  h.max_bits_one = 8;
  h.max_bits_both = vnni ? 8 : 7;
  return h;
}

// Nothing asked: int8 per channel, in both roundings for gradients, and no pairs.
TEST(ProfileRequest, Int8PerChannelAlways) {
  const ProfileRequest r = profileRequest(ProfileAsk{}, cpu(true));
  EXPECT_EQ(r.formats, std::vector<QuantFormat>{f("int8:channel:rtn")});
  EXPECT_EQ(r.gradient_formats, std::vector<QuantFormat>{f("int8:channel:sr")});
  EXPECT_FALSE(r.outputs);
  EXPECT_FALSE(r.metrics);
  EXPECT_TRUE(r.output_pairs.empty());
}

// Without VNNI each integer format is profiled at 8 bits (one side may have them) and
// at 7 (both sides); the output pairs, which quantize both sides, only at 7.
TEST(ProfileRequest, IntegerWidthsFollowTheCpu) {
  ProfileAsk ask;
  ask.bits = 6;
  ask.granularity = ScaleLayout::parse("block64");
  ask.metrics = true;
  const ProfileRequest r = profileRequest(ask, cpu(false));
  EXPECT_EQ(r.formats, (std::vector<QuantFormat>{f("int8:channel:rtn"), f("int7:channel:rtn"), f("int6:block64:rtn")}));
  EXPECT_EQ(r.gradient_formats,
            (std::vector<QuantFormat>{f("int8:channel:sr"), f("int7:channel:sr"), f("int6:block64:sr")}));
  const std::vector<FormatPair> pairs = {
      {f("int6:block64:rtn"), f("int6:block64:rtn")},
      {f("int6:block64:rtn"), f("int6:block64:sr")},
      {f("int7:channel:rtn"), f("int7:channel:rtn")},
      {f("int7:channel:rtn"), f("int7:channel:sr")},
  };
  EXPECT_EQ(r.output_pairs, pairs);
  // With VNNI the 8-bit pairs run exactly, and asking for int8 per channel twice adds
  // nothing.
  ask.bits = 8;
  ask.granularity = ScaleLayout{};
  const ProfileRequest v = profileRequest(ask, cpu(true));
  EXPECT_EQ(v.formats, std::vector<QuantFormat>{f("int8:channel:rtn")});
  EXPECT_EQ(v.output_pairs, (std::vector<FormatPair>{{f("int8:channel:rtn"), f("int8:channel:rtn")},
                                                     {f("int8:channel:rtn"), f("int8:channel:sr")}}));
}

// A scheme adds its operand format (round to nearest) and its gradient format in both
// roundings, and a pair of each gradient rounding; a single format adds itself only;
// int8 adds nothing (always profiled). Order of first appearance.
TEST(ProfileRequest, SchemesAndFormats) {
  ProfileAsk ask;
  ask.candidates = {Scheme::kFp8, f("e4m3:channel:rtn"), Scheme::kInt8, Scheme::kMxfp8, f("e4m3:tensor:rtn")};
  ask.metrics = true;
  ask.outputs = true;
  const ProfileRequest r = profileRequest(ask, cpu(true));
  EXPECT_EQ(r.formats, (std::vector<QuantFormat>{f("int8:channel:rtn"), f("e4m3:tensor:rtn"), f("e4m3:channel:rtn"),
                                                 f("e4m3:block32:rtn:scale=e8m0")}));
  EXPECT_EQ(r.gradient_formats,
            (std::vector<QuantFormat>{f("int8:channel:sr"), f("e5m2:tensor:rtn"), f("e5m2:tensor:sr"),
                                      f("e4m3:block32:rtn:scale=e8m0"), f("e4m3:block32:sr:scale=e8m0")}));
  EXPECT_TRUE(r.outputs);
  ASSERT_EQ(r.output_pairs.size(), 6u);  // int8 (2), fp8 (2), mxfp8 (2); no pair for single formats
  EXPECT_EQ(r.output_pairs[2], (FormatPair{f("e4m3:tensor:rtn"), f("e5m2:tensor:rtn")}));
  EXPECT_EQ(r.output_pairs[5], (FormatPair{f("e4m3:block32:rtn:scale=e8m0"), f("e4m3:block32:sr:scale=e8m0")}));
}

// A 4-bit scheme adds its weights' 2-D tiles beside the operand format, and each with
// and without the random Hadamard transform a policy may ask for.
TEST(ProfileRequest, FourBitSchemesWithAndWithoutTheTransform) {
  ProfileAsk ask;
  ask.candidates = {Scheme::kNvfp4};
  const ProfileRequest r = profileRequest(ask, cpu(true));
  EXPECT_EQ(r.formats, (std::vector<QuantFormat>{f("int8:channel:rtn"), f("e2m1:block16:rtn:scale=e4m3"),
                                                 f("e2m1:block16x16:rtn:scale=e4m3"),
                                                 f("e2m1:block16:rtn:scale=e4m3:rht"),
                                                 f("e2m1:block16x16:rtn:scale=e4m3:rht")}));
  EXPECT_EQ(r.gradient_formats,
            (std::vector<QuantFormat>{f("int8:channel:sr"), f("e2m1:block16:rtn:scale=e4m3"),
                                      f("e2m1:block16:sr:scale=e4m3"), f("e2m1:block16:rtn:scale=e4m3:rht"),
                                      f("e2m1:block16:sr:scale=e4m3:rht")}));
}

TEST(ProfileRequest, ParsesCandidates) {
  EXPECT_EQ(std::get<Scheme>(parseProfileCandidate("moss_fp8")), Scheme::kMossFp8);
  EXPECT_EQ(std::get<QuantFormat>(parseProfileCandidate("int4:tensor:sr")), f("int4:tensor:sr"));
  try {
    parseProfileCandidate("fp9");
    FAIL() << "fp9 parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'fp9' is neither a format scheme (int8, fp8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pgq
