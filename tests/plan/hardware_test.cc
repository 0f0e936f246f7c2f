#include <gtest/gtest.h>

#include "plan/hardware.h"
#include "support/errors.h"

namespace pgq {
namespace {

const std::string kValid = R"(name: test
threads: 2
peak_gflops: {f32: 200, bf16: 200, int8: 400}
gemm_gflops: {f32: 180, bf16: 170, int8: 340}
memory_bandwidth_gbs: 40
quantize_gbs: {rtn: 30, sr: 15}
int8: {vnni: false, max_bits_one: 8, max_bits_both: 7}
)";

std::string errorOf(const std::string& yaml) {
  try {
    parseHardwareModel(yaml, "hw.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::string replaced(const std::string& from, const std::string& to) {
  std::string t = kValid;
  return t.replace(t.find(from), from.size(), to);
}

TEST(Hardware, PresetsLoadAndRidgesFollow) {
  for (const std::string& name : hardwarePresetNames()) {
    SCOPED_TRACE(name);
    HardwareModel hw = loadHardwareModel(name);
    EXPECT_GT(hw.peak_int8, hw.peak_f32);
    EXPECT_NEAR(hw.ridge(DType::kF32), hw.peak_f32 / hw.bandwidth_gbs, 1e-9);
    // The YAML it writes reads back to the same model.
    EXPECT_EQ(hardwareToYaml(parseHardwareModel(hardwareToYaml(hw), "again")), hardwareToYaml(hw));
  }
  HardwareModel zen3 = loadHardwareModel("epyc-zen3-2c");
  EXPECT_FALSE(zen3.vnni);
  EXPECT_EQ(zen3.max_bits_both, 7);
}

TEST(Hardware, BadFilesNameTheField) {
  EXPECT_EQ(errorOf(kValid), "no error");
  EXPECT_NE(errorOf(replaced("int8: 400}", "}")).find("field 'peak_gflops.int8': is missing"), std::string::npos);
  EXPECT_NE(errorOf(replaced("f32: 200", "f32: 0")).find("field 'peak_gflops.f32': expected a number"), std::string::npos);
  EXPECT_NE(errorOf(replaced("memory_bandwidth_gbs: 40", "memory_bandwidth_gbs: -5")).find("memory_bandwidth_gbs"),
            std::string::npos);
  EXPECT_NE(errorOf(replaced("int8: 340", "int8: 900")).find("cannot exceed the peak"), std::string::npos);
  EXPECT_NE(errorOf(kValid + "ridge_flop_per_byte: {f32: 50}\n").find("does not match peak / bandwidth = 5"),
            std::string::npos);
  EXPECT_NE(errorOf(replaced("max_bits_both: 7", "max_bits_both: 8")).find("without VNNI"), std::string::npos);
  EXPECT_NE(errorOf(kValid + "flux: 3\n").find("unknown field 'flux'"), std::string::npos);
  EXPECT_NE(errorOf("name: x\n").find("is missing"), std::string::npos);
  EXPECT_THROW(loadHardwareModel("no-such-chip"), Error);
}

TEST(Hardware, InterconnectCostsRingCollectives) {
  HardwareModel none = parseHardwareModel(kValid, "hw.yaml");
  EXPECT_EQ(none.interconnect_gbs, 0);
  EXPECT_EQ(estimateCollectiveUs(none, CollectiveKind::kAllReduce, 1e6, 8), 0);
  HardwareModel hw = parseHardwareModel(kValid + "interconnect: {gbs: 10, latency_us: 2}\n", "hw.yaml");
  EXPECT_EQ(hw.interconnect_gbs, 10);
  // 1 MB all_reduce over 4 devices: 2 * 3/4 MB at 10 GB/s = 150 us, plus 6 hops of 2 us.
  EXPECT_NEAR(estimateCollectiveUs(hw, CollectiveKind::kAllReduce, 1e6, 4), 162.0, 1e-9);
  EXPECT_NEAR(estimateCollectiveUs(hw, CollectiveKind::kAllGather, 1e6, 4), 81.0, 1e-9);
  EXPECT_EQ(estimateCollectiveUs(hw, CollectiveKind::kAllReduce, 1e6, 1), 0);
  EXPECT_NE(errorOf(kValid + "interconnect: {gbs: 0}\n").find("gbs"), std::string::npos);
  EXPECT_NE(errorOf(kValid + "interconnect: {gbs: 1, hops: 2}\n").find("hops"), std::string::npos);
  // Written back by hardwareToYaml.
  EXPECT_EQ(parseHardwareModel(hardwareToYaml(hw), "again").interconnect_latency_us, 2);
}

TEST(Hardware, RooflineEstimates) {
  HardwareModel hw = parseHardwareModel(kValid, "hw.yaml");
  // A big compute-bound GEMM: close to the int8/f32 GEMM rate ratio, minus quantization.
  GemmEstimate big = estimateGemm(hw, {1, 4096, 4096, 4096}, DType::kF32, false, false);
  EXPECT_GT(big.speedup(), 1.7);
  EXPECT_LT(big.speedup(), 340.0 / 180.0);
  // A tiny GEMM: call overheads and quantization eat the gain.
  EXPECT_LT(estimateGemm(hw, {1, 64, 32, 32}, DType::kF32, false, false).speedup(), 1.0);
  // Stochastic rounding (slower quantizer) lowers the estimate.
  GemmEstimate sr = estimateGemm(hw, {1, 2048, 256, 256}, DType::kF32, true, false);
  GemmEstimate rtn = estimateGemm(hw, {1, 2048, 256, 256}, DType::kF32, false, false);
  EXPECT_LT(sr.speedup(), rtn.speedup());
  EXPECT_GT(rtn.quantization_us, 0);
}

}  // namespace
}  // namespace pgq
