#include <gtest/gtest.h>

#include "plan/policy.h"
#include "support/errors.h"

namespace pgq {
namespace {

TEST(Policy, StandardNames) {
  Policy f = loadPolicy("F");
  EXPECT_TRUE(f.forward.quantize);
  EXPECT_FALSE(f.backward.quantize);
  Policy fb = loadPolicy("F+B");
  EXPECT_TRUE(fb.backward.quantize);
  EXPECT_EQ(fb.backward.gradient_rounding, Rounding::kNearest);
  Policy sr = loadPolicy("F+B_SR");
  EXPECT_EQ(sr.backward.gradient_rounding, Rounding::kStochastic);
  EXPECT_EQ(sr.backward.rounding, Rounding::kNearest);
  Policy t = loadPolicy("F+B_SR>1.5");
  EXPECT_DOUBLE_EQ(t.backward.threshold, 1.5);
  EXPECT_FALSE(t.backward.invert);
  Policy adv = loadPolicy("F+B_SR<100");
  EXPECT_TRUE(adv.backward.invert);
  EXPECT_DOUBLE_EQ(adv.backward.threshold, 100);
  Policy both = loadPolicy("F>20+B_SR>1");
  EXPECT_DOUBLE_EQ(both.forward.threshold, 20);
  EXPECT_DOUBLE_EQ(both.backward.threshold, 1);
  Policy rtn = loadPolicy("F+B<5");
  EXPECT_TRUE(rtn.backward.invert);
  EXPECT_EQ(rtn.backward.gradient_rounding, Rounding::kNearest);
  for (const char* bad : {"G", "F+B_SR>x", "F+B_SR<0", "F+", "f+b", "F+B>"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(loadPolicy(bad), Error);
  }
}

TEST(Policy, YamlWithRules) {
  Policy p = parsePolicy(R"(name: custom
forward: {quantize: true, threshold: 20}
backward: {quantize: true, threshold: 1, gradient_rounding: sr}
bits: 8
granularity: channel
min_speedup: 1.2
low_sqnr: block64
rules:
  - {label: "get_logits.*", action: keep}
  - {direction: bwd_wgrad, layers: [0, 1], action: quantize, lhs_format: "int8:block32:rtn", rhs_format: "int7:block32:sr"}
)",
                         "p.yaml");
  EXPECT_EQ(p.rules.size(), 2u);
  ASSERT_TRUE(p.low_sqnr);
  EXPECT_EQ(p.low_sqnr->text(), "block64");
  EXPECT_EQ(p.backward.gradient_rounding, Rounding::kStochastic);
  EXPECT_EQ(p.rules[1].lhs_format, QuantFormat::parse("int8:block32:rtn"));
  EXPECT_EQ(p.rules[1].rhs_format, QuantFormat::parse("int7:block32:sr"));
  EXPECT_FALSE(p.rules[0].lhs_format);
  EXPECT_EQ(p.formats, std::vector<Scheme>{Scheme::kInt8});
  EXPECT_DOUBLE_EQ(p.min_speedup, 1.2);
  EXPECT_EQ(p.rules[1].layer_max, 1);
}

// A granularity is read once and gives each GEMM its formats.
TEST(Policy, ScaleLayout) {
  for (const char* text : {"channel", "tensor", "block64", "channel:clip=mse", "block32:asym:clip=p99.9"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(ScaleLayout::parse(text).text(), text);
  }
  EXPECT_EQ(ScaleLayout::parse("block64").withBits(7, Rounding::kStochastic).toString(), "int7:block64:sr");
  EXPECT_THROW(ScaleLayout::parse("rows"), Error);
  Policy p = parsePolicy("forward: {quantize: true}\nbackward: {quantize: false}\ngranularity: tensor\n", "p.yaml");
  EXPECT_EQ(p.granularity.format, QuantFormat::parse("int8:tensor:rtn"));
  EXPECT_FALSE(p.low_sqnr);  // keep
  // A refinement follows the granularity in a policy, as the message that refuses a bad
  // one says (it was refused: the parser put it before the rounding).
  p = parsePolicy("forward: {quantize: true}\nbackward: {quantize: false}\nlow_sqnr: \"channel:clip=mse\"\n", "p.yaml");
  ASSERT_TRUE(p.low_sqnr);
  EXPECT_EQ(p.low_sqnr->withBits(8, Rounding::kNearest), QuantFormat::parse("int8:channel:rtn:clip=mse"));
}

// The one threshold test: above the threshold (0: always), or below it when inverted.
TEST(Policy, ThresholdPasses) {
  DirectionPolicy always;
  EXPECT_TRUE(always.passes(0.5));
  DirectionPolicy above;
  above.threshold = 10;
  EXPECT_TRUE(above.passes(10.5));
  EXPECT_FALSE(above.passes(10));
  DirectionPolicy below = above;
  below.invert = true;
  EXPECT_TRUE(below.passes(9.5));
  EXPECT_FALSE(below.passes(10));
}

TEST(Policy, BadYamlNamesTheField) {
  auto errorOf = [](const std::string& yaml) {
    try {
      parsePolicy(yaml, "p.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string dirs = "forward: {quantize: true}\nbackward: {quantize: false}\n";
  EXPECT_EQ(errorOf(dirs), "no error");
  EXPECT_NE(errorOf("forward: {quantize: true}\n").find("field 'backward': is missing"), std::string::npos);
  EXPECT_NE(errorOf(dirs + "bits: 9\n").find("field 'bits'"), std::string::npos);
  EXPECT_NE(errorOf(dirs + "granularity: rows\n").find("field 'granularity'"), std::string::npos);
  EXPECT_NE(errorOf("forward: {quantize: true, threshold: -1}\nbackward: {quantize: false}\n").find("threshold"),
            std::string::npos);
  EXPECT_NE(errorOf("forward: {quantize: true, invert: true}\nbackward: {quantize: false}\n").find("needs a threshold"),
            std::string::npos);
  EXPECT_NE(errorOf(dirs + "rules:\n  - {label: \"(\", action: keep}\n").find("not a valid regular expression"),
            std::string::npos);
  EXPECT_NE(errorOf(dirs + "rules:\n  - {action: maybe}\n").find("expected one of quantize, keep"), std::string::npos);
  EXPECT_NE(errorOf(dirs + "rules:\n  - {action: keep, lhs_format: int8:channel:rtn}\n").find("only a quantize rule"),
            std::string::npos);
  EXPECT_NE(errorOf(dirs + "rules:\n  - {action: quantize, lhs_format: int8:channel:rtn}\n").find("give both"),
            std::string::npos);
}

}  // namespace
}  // namespace pgq
