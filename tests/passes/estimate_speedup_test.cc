#include <gtest/gtest.h>

#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/estimate_speedup.h"
#include "passes/registry.h"
#include "passes/tag_metadata.h"
#include "support/errors.h"

namespace pgq {
namespace {

// A forward GEMM (activation x weight) and its weight gradient (activation x gradient).
const char* kGemms = R"(graph @g {
  %x = input() : f32[64,32]
  %w = parameter() : f32[32,48]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="up"} : f32[64,48]
  %t = input() : s32[64]
  %one = constant() {value=1.0} : f32[]
  %dh = cross_entropy_grad(%h, %t, %one) : f32[64,48]
  %dw = matmul(%x, %dh) {lhs_contract=[0], rhs_contract=[0], label="up:wgrad"} : f32[32,48]
  return %dw
}
)";

// Made-up rates, with stochastic rounding much slower than round-to-nearest so that
// the quantizer of the gradient operand shows in the estimate.
HardwareModel handMade() {
  HardwareModel hw;
  hw.name = "hand-made";
  hw.peak_f32 = hw.gemm_f32 = 100;
  hw.peak_bf16 = hw.gemm_bf16 = 200;
  hw.peak_int8 = hw.gemm_int8 = 800;
  hw.bandwidth_gbs = 20;
  hw.quantize_rtn_gbs = 10;
  hw.quantize_sr_gbs = 2;
  hw.call_overhead_us = 1;
  return hw;
}

std::unique_ptr<Graph> tagged() {
  auto g = parseGraph(kGemms);
  PassContext ctx;
  TagMetadata().run(*g, ctx);
  return g;
}

TEST(EstimateSpeedup, AnnotatesEveryGemmWithItsRooflineEstimate) {
  auto g = tagged();
  PassContext ctx;
  EstimateSpeedup pass({.hardware = handMade()});
  EXPECT_TRUE(pass.run(*g, ctx));
  const Attrs& fwd = g->find("h")->attrs();
  const Attrs& wgrad = g->find("dw")->attrs();
  EXPECT_EQ(fwd.getFloat(AttrKey::kEstSpeedup),
            estimateGemm(handMade(), {1, 64, 32, 48}, DType::kF32, false, false).speedup());
  // The gradient (rhs) operand is quantized with stochastic rounding, the slower one.
  double sr = estimateGemm(handMade(), {1, 32, 64, 48}, DType::kF32, false, true).speedup();
  EXPECT_EQ(wgrad.getFloat(AttrKey::kEstSpeedup), sr);
  EXPECT_LT(sr, estimateGemm(handMade(), {1, 32, 64, 48}, DType::kF32, false, false).speedup());
  // Only the annotation changes: no node is added or removed.
  EXPECT_EQ(g->size(), parseGraph(kGemms)->size());
}

TEST(EstimateSpeedup, ASecondRunChangesNothing) {
  auto g = tagged();
  PassContext ctx;
  EstimateSpeedup pass({.hardware = handMade()});
  EXPECT_TRUE(pass.run(*g, ctx));
  std::string once = printGraph(*g);
  EXPECT_FALSE(pass.run(*g, ctx));
  EXPECT_EQ(printGraph(*g), once);
  // Another hardware model changes the estimates.
  HardwareModel faster_quantizer = handMade();
  faster_quantizer.quantize_rtn_gbs *= 2;
  EXPECT_TRUE(EstimateSpeedup({.hardware = faster_quantizer}).run(*g, ctx));
}

TEST(EstimateSpeedup, NeedsAHardwareModelAndTags) {
  EXPECT_THROW(EstimateSpeedup({}), Error);
  try {
    createPass("estimate_speedup");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pass 'estimate_speedup': missing required option 'hardware'"),
              std::string::npos)
        << e.what();
  }
  auto untagged = parseGraph(kGemms);
  PassContext ctx;
  EXPECT_THROW(EstimateSpeedup({.hardware = handMade()}).run(*untagged, ctx), Error);
}

TEST(EstimateSpeedup, TakesAPresetOrAFileFromText) {
  auto g = tagged();
  PassContext ctx;
  EXPECT_TRUE(createPass("estimate_speedup{hardware=epyc-zen3-2c}")->run(*g, ctx));
  EXPECT_EQ(g->find("h")->attrs().getFloat(AttrKey::kEstSpeedup),
            estimateGemm(loadHardwareModel("epyc-zen3-2c"), {1, 64, 32, 48}, DType::kF32, false, false).speedup());
}

}  // namespace
}  // namespace pgq
