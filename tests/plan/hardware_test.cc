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

// A GPU with a shape model and the table it was fitted to (two rows of the H100's).
const std::string kGpu = R"(name: gpu
threads: 1
high_precision: bf16
formats: [int8, fp8]
peak_gflops: {f32: 66900, bf16: 989500, int8: 1979000, fp8: 1979000}
gemm_gflops: {f32: 46800, bf16: 714000, int8: 1390000, fp8: 1390000}
memory_bandwidth_gbs: 3010
quantize_gbs: {rtn: 2940, sr: 2940}
call_overhead_us: 5.92
int8: {vnni: true, max_bits_one: 8, max_bits_both: 8}
gemm_model:
  sms: 132
  tile: 128
  bf16: {max_split_k: 6, split_k_sms: 120, tile_us: 0.97, launch_us: 4.45}
  fp8: {max_split_k: 4, split_k_sms: 88, tile_us: 0.72, launch_us: 5.94}
attention: {fused: true, fwd_efficiency: 0.919, bwd_efficiency: 0.678}
measured_gemms:
  - {b: 1, m: 768, k: 32768, n: 768, bf16_us: 66.56, fp8_us: 60.58}
  - {b: 1, m: 8192, k: 4096, n: 11008, bf16_us: 1149, fp8_us: 565.3}
)";

std::string gpuReplaced(const std::string& from, const std::string& to) {
  std::string t = kGpu;
  return t.replace(t.find(from), from.size(), to);
}

TEST(Hardware, GpuShapeModelFollowsTilesAndSplitK) {
  HardwareModel hw = parseHardwareModel(kGpu, "gpu.yaml");
  EXPECT_EQ(hardwareToYaml(parseHardwareModel(hardwareToYaml(hw), "again")), hardwareToYaml(hw));
  // A long K over few output tiles: FP8 gains little (measured 1.10x on an H100; the
  // model says 1.34x, one of its worst shapes, against the datasheet model's 1.85x).
  GpuGemmEstimate wgrad = estimateGpuGemm(hw, {1, 768, 32768, 768});
  EXPECT_LT(wgrad.bf16_us / wgrad.fp8_us, 1.4);
  // The same flops as a tall GEMM: FP8 pays more (measured 1.49x).
  GpuGemmEstimate tall = estimateGpuGemm(hw, {1, 32768, 768, 768});
  EXPECT_GT(tall.bf16_us / tall.fp8_us, wgrad.bf16_us / wgrad.fp8_us + 0.2);
  // Big GEMMs approach the ratio of the achieved rates.
  GpuGemmEstimate big = estimateGpuGemm(hw, {1, 8192, 4096, 11008});
  EXPECT_NEAR(big.bf16_us / big.fp8_us, 1390000.0 / 714000, 0.1);
  // Each operand's cast: 3 bytes per element at the cast rate, plus a launch.
  EXPECT_NEAR(big.a_cast_us, 5.92 + 3.0 * 8192 * 4096 / 2940e3, 1e-9);
  EXPECT_NEAR(big.b_cast_us, 5.92 + 3.0 * 4096 * 11008 / 2940e3, 1e-9);
  // Inside the measured range, and 4x beyond it in K.
  EXPECT_EQ(big.extrapolation, 1.0);
  EXPECT_DOUBLE_EQ(extrapolationOf(hw, {1, 8192, 131072, 4096}), 4.0);
  EXPECT_EQ(extrapolationOf(loadHardwareModel("b200"), {1, 8192, 4096, 4096}), 0.0);  // no table
}

TEST(Hardware, FusedAttentionIsOneFlashKernel) {
  HardwareModel hw = parseHardwareModel(kGpu, "gpu.yaml");
  const OperandRoles acts = {OperandRole::kActivation, OperandRole::kActivation};
  // medium at 32K tokens: 1024 heads of 256 x 64. The two forward GEMMs share the forward
  // kernel, the four gradient GEMMs the backward one.
  const double fwd = estimateFlashAttentionUs(hw, 1024, 256, 64, false);
  const double bwd = estimateFlashAttentionUs(hw, 1024, 256, 64, true);
  EXPECT_DOUBLE_EQ(*fusedAttentionUs(hw, {1024, 256, 64, 256}, GemmDirection::kFwd, acts), fwd / 2);
  EXPECT_DOUBLE_EQ(*fusedAttentionUs(hw, {1024, 256, 256, 64}, GemmDirection::kFwd, acts), fwd / 2);
  EXPECT_DOUBLE_EQ(*fusedAttentionUs(hw, {1024, 64, 256, 256}, GemmDirection::kBwdDgrad, acts), bwd / 4);
  // Measured: 57 us forward, 251 us backward on the H100.
  EXPECT_NEAR(fwd, 57.0, 57.0 * 0.2);
  EXPECT_NEAR(bwd, 251.0, 251.0 * 0.2);
  // Not attention: a weight operand, one batch, or no repeated dim; not fused hardware.
  const OperandRoles weight = {OperandRole::kActivation, OperandRole::kWeight};
  EXPECT_FALSE(fusedAttentionUs(hw, {1024, 256, 64, 256}, GemmDirection::kFwd, weight));
  EXPECT_FALSE(fusedAttentionUs(hw, {1, 256, 64, 256}, GemmDirection::kFwd, acts));
  EXPECT_FALSE(fusedAttentionUs(hw, {8, 256, 64, 128}, GemmDirection::kFwd, acts));
  EXPECT_FALSE(fusedAttentionUs(parseHardwareModel(kValid, "cpu.yaml"), {1024, 256, 64, 256}, GemmDirection::kFwd,
                                acts));
}

TEST(Hardware, BadGpuFieldsNameTheField) {
  auto error = [](const std::string& yaml) {
    try {
      parseHardwareModel(yaml, "probe.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error(kGpu), "no error");
  EXPECT_NE(error(gpuReplaced("fp8_us: 60.58", "fp8_us: .nan")).find("field 'measured_gemms[0].fp8_us'"),
            std::string::npos);
  const std::string negative = error(gpuReplaced("bf16_us: 66.56", "bf16_us: -66.56"));
  EXPECT_NE(negative.find("probe.yaml:18: field 'measured_gemms[0].bf16_us'"), std::string::npos) << negative;
  EXPECT_NE(error(gpuReplaced("k: 32768, ", "")).find("field 'measured_gemms[0].k': is missing"), std::string::npos);
  EXPECT_NE(error(gpuReplaced("n: 768,", "n: 7.5,")).find("measured_gemms[0].n"), std::string::npos);
  // Session 15: a repeated shape was accepted.
  EXPECT_NE(error(gpuReplaced("  - {b: 1, m: 8192, k: 4096, n: 11008", "  - {b: 1, m: 768, k: 32768, n: 768"))
                .find("probe.yaml:19: field 'measured_gemms[1]': shape [1, 768, 32768, 768] is listed again "
                      "(measured_gemms[0])"),
            std::string::npos)
      << error(gpuReplaced("  - {b: 1, m: 8192, k: 4096, n: 11008", "  - {b: 1, m: 768, k: 32768, n: 768"));
  EXPECT_NE(error(gpuReplaced("tile_us: 0.97, ", "")).find("field 'gemm_model.bf16.tile_us'"), std::string::npos);
  EXPECT_NE(error(gpuReplaced("split_k_sms: 120", "split_k_sms: 200")).find("gemm_model.bf16.split_k_sms"),
            std::string::npos);
  // A model that does not predict its own table (a hand-edited rate: 10x too slow).
  EXPECT_NE(error(gpuReplaced("bf16: 714000", "bf16: 71400"))
                .find("field 'gemm_model': predicts the bf16 times of measured_gemms"),
            std::string::npos)
      << error(gpuReplaced("bf16: 714000", "bf16: 71400"));
  EXPECT_NE(error(gpuReplaced("  bf16: {max_split_k: 6, split_k_sms: 120, tile_us: 0.97, launch_us: 4.45}\n",
                              "  bf16: {max_split_k: 6, split_k_sms: 120, tile_us: 0.97, launch_us: 400}\n"))
                .find("median error"),
            std::string::npos);
  // A table or fused attention without the model they belong to.
  std::string no_model = kGpu.substr(0, kGpu.find("gemm_model:")) + kGpu.substr(kGpu.find("measured_gemms:"));
  EXPECT_NE(error(no_model).find("field 'measured_gemms': a table of measured GEMMs needs the gemm_model"),
            std::string::npos);
  EXPECT_NE(error(kValid + "attention: {fused: true, fwd_efficiency: 0.9, bwd_efficiency: 0.6}\n")
                .find("field 'attention.fused'"),
            std::string::npos);
  EXPECT_NE(error(gpuReplaced("fwd_efficiency: 0.919", "fwd_efficiency: 1.5")).find("attention.fwd_efficiency"),
            std::string::npos);
}

}  // namespace
}  // namespace pgq
