#include <gtest/gtest.h>

#include "app/roofline.h"

namespace pgq {
namespace {

const std::string kHardware = R"(name: linked
threads: 1
peak_gflops: {f32: 1000, bf16: 2000, int8: 4000}
gemm_gflops: {f32: 900, bf16: 1800, int8: 3600}
memory_bandwidth_gbs: 100
quantize_gbs: {rtn: 100, sr: 50}
int8: {vnni: true, max_bits_one: 8, max_bits_both: 8}
interconnect: {gbs: 10, latency_us: 1}
)";

TEST(Roofline, UsesPerDeviceShapesAndCostsCollectives) {
  HardwareModel hw = parseHardwareModel(kHardware, "hw.yaml");
  ModelOverrides two;
  two.tensor_parallel = 2;
  RooflineReport one = analyzeRoofline(loadModelConfig("small"), hw, Precision::kF32, 1.0);
  RooflineReport split = analyzeRoofline(loadModelConfig("small", two), hw, Precision::kF32, 1.0);
  EXPECT_EQ(one.collectives, 0);
  EXPECT_EQ(one.collective_us, 0);
  EXPECT_EQ(split.gemms, one.gemms);
  EXPECT_GT(split.collectives, 0);
  EXPECT_GT(split.collective_us, 0);
  for (const RooflineRow& row : split.rows) {
    if (row.name != "mlp/up" || row.direction != GemmDirection::kFwd) continue;
    EXPECT_EQ(row.sharding, ShardingKind::kColumn);
    EXPECT_EQ(row.device_shape[3] * 2, row.gemm_shape[3]);  // N split over the 2 devices
    EXPECT_EQ(row.count, 4);                                // one per layer
  }
  // Collectives take time int8 does not shrink: the step gains less than the GEMMs.
  EXPECT_LT(split.stepSpeedup(), split.gemm_us / split.gemm_mixed_us);
  EXPECT_NE(rooflineText(split).find("per device"), std::string::npos);
}

// Attention's batched GEMMs on a GPU that fuses them are shares of one flash kernel,
// which runs in bf16: never counted as quantized (session 15: their 1.00x met the
// default --min-speedup 1 and 72 of gpt2-124m's 291 GEMMs were called int8).
TEST(Roofline, FusedAttentionGemmsAreNeverQuantized) {
  ModelOverrides batch;
  batch.batch = 64;
  RooflineReport r = analyzeRoofline(loadModelConfig("gpt2-124m", batch), loadHardwareModel("h100-sxm"),
                                     Precision::kBf16, 1.0);
  int attention = 0, quantized = 0;
  for (const RooflineRow& row : r.rows) {
    if (row.name.starts_with("attn/scores") || row.name.starts_with("attn/av")) {
      attention += row.count;
      EXPECT_FALSE(row.int8) << row.name;
    }
    quantized += row.int8 ? row.count : 0;
  }
  EXPECT_EQ(attention, 72);
  EXPECT_EQ(r.int8_gemms, quantized);
}

// The same estimate as `pgq recipe` gives an F+B recipe: round to nearest (stochastic
// rounding, F+B_SR's, was charged), and on hardware that casts each tensor once, each
// GEMM's share of the cast. attn/q's forward read its activation's whole cast where
// recipe --explain charged a sixth (20.9 us against 5.5 on h100-sxm; session 17's hunt).
TEST(Roofline, EstimatesAsTheRecipeGeneratorDoes) {
  const HardwareModel h100 = loadHardwareModel("h100-sxm");
  RooflineReport r = analyzeRoofline(loadModelConfig("small"), h100, Precision::kBf16, 1.0);
  const QuantFormat int8 = perChannelFormat(8, Rounding::kNearest);
  int checked = 0;
  for (const RooflineRow& row : r.rows) {
    if (row.name != "attn/q" || row.direction != GemmDirection::kFwd) continue;
    ++checked;
    // Its activation is read by q, k and v forward and by their weight gradients (6);
    // its weight by its forward and its dgrad (2).
    const GemmEstimate e = estimateGemm(h100, row.device_shape, DType::kBF16, int8, int8, 1.0 / 6, 1.0 / 2);
    EXPECT_DOUBLE_EQ(row.int8_us, e.int8Us());
  }
  // Without cast_once, a gradient operand is cast with round to nearest.
  RooflineReport cpu = analyzeRoofline(loadModelConfig("small"), loadHardwareModel("epyc-zen3-2c"),
                                       Precision::kF32, 1.0);
  for (const RooflineRow& row : cpu.rows) {
    if (row.name != "attn/q:dgrad") continue;
    ++checked;
    const GemmEstimate e = estimateGemm(loadHardwareModel("epyc-zen3-2c"), row.device_shape, DType::kF32, int8, int8);
    EXPECT_DOUBLE_EQ(row.int8_us, e.int8Us());
  }
  EXPECT_EQ(checked, 2);
}

}  // namespace
}  // namespace pgq
