// Stage (ii) on CPUs with bf16 GEMMs (AMX, AVX512-BF16): bf16 as a third choice beside
// int8 and f32, per GEMM, from the profile's bf16 statistics and the roofline.
#include <gtest/gtest.h>

#include "plan/hardware.h"
#include "plan/policy.h"
#include "plan/recipe.h"
#include "plan/recipe_export.h"
#include "plan/recipe_generator.h"
#include "support/errors.h"
#include "tests/plan/recipe_test_util.h"

namespace pgq {
namespace {

// What pgq hwprobe wrote on a 2-core Xeon with AMX (docs/PERFORMANCE.md's machine).
constexpr const char* kAmxCpu = R"(name: amx-2t
threads: 2
formats: [int8, bf16]
peak_gflops: {f32: 196, bf16: 443, int8: 996}
gemm_gflops: {f32: 196, bf16: 443, int8: 996}
memory_bandwidth_gbs: 25.7
quantize_gbs: {rtn: 16.3, sr: 14.9}
call_overhead_us: 2
int8: {vnni: true, max_bits_one: 8, max_bits_both: 8}
)";

OperandProfile operand(GemmOperand side, OperandRole role, double int8_sqnr) {
  OperandProfile o;
  o.side = side;
  o.role = role;
  o.tensor = std::string(side == GemmOperand::kLhs ? "a" : "b");
  auto add = [&](const char* f, double s) { o.formats.push_back({QuantFormat::parse(f), s, s, s, 1.0 / s, 0, 0}); };
  add("int8:channel:rtn", int8_sqnr);
  add("int8:channel:sr", int8_sqnr / 2);
  add("bf16:tensor:rtn", 3e5);
  return o;
}

GemmProfile gemm(const std::string& label, GemmDirection direction, std::vector<int64_t> shape, double int8_sqnr) {
  GemmProfile g;
  g.label = label;
  g.direction = direction;
  g.gemm_shape = g.device_shape = shape;
  g.flops = 2 * shape[0] * shape[1] * shape[2] * shape[3];
  g.bytes = 4 * shape[0] * (shape[1] * shape[2] + shape[2] * shape[3] + shape[1] * shape[3]);
  const bool wgrad = direction == GemmDirection::kBwdWgrad;
  g.operands = {operand(GemmOperand::kLhs, wgrad ? OperandRole::kGradient : OperandRole::kActivation, int8_sqnr),
                operand(GemmOperand::kRhs, wgrad ? OperandRole::kActivation : OperandRole::kWeight, 3e4)};
  g.operands[0].tensor = label + ".a";
  g.operands[1].tensor = label + ".b";
  return g;
}

Profile cpuProfile() {
  Profile p;
  p.run.model = "test";
  p.gemms = {
      gemm("up", GemmDirection::kFwd, {1, 2048, 768, 3072}, 3e3),    // int8 passes
      gemm("down", GemmDirection::kFwd, {1, 2048, 3072, 768}, 8),    // int8 fails: bf16
      gemm("tiny", GemmDirection::kFwd, {1, 16, 16, 16}, 8),         // neither pays off: f32
      gemm("narrow", GemmDirection::kFwd, {1, 96, 256, 256}, 8),     // int8 fails, bf16 does not pay off
      gemm("up:wgrad", GemmDirection::kBwdWgrad, {1, 768, 2048, 3072}, 0.5),  // fails int8: bf16
  };
  return p;
}

using testing::entry;

TEST(Bf16Recipe, Int8WhereItPassesBf16WhereNotF32WhereNeitherPays) {
  const HardwareModel hw = parseHardwareModel(kAmxCpu, "amx.yaml");
  const Policy policy = loadPolicy(PGQ_SOURCE_DIR "/recipes/policies/int8-bf16.yaml");
  const Recipe r = generateRecipe(cpuProfile(), hw, policy, "p.yaml");
  EXPECT_EQ(entry(r, "up").lhs_format.toString(), "int8:channel:rtn");
  EXPECT_EQ(entry(r, "down").decision, Decision::kQuantize);
  EXPECT_EQ(entry(r, "down").lhs_format.toString(), "bf16:tensor:rtn");
  EXPECT_EQ(entry(r, "down").rhs_format.toString(), "bf16:tensor:rtn");
  EXPECT_NE(entry(r, "down").reason.find("bf16 (activation bf16:tensor:rtn 3e+05"), std::string::npos)
      << entry(r, "down").reason;
  EXPECT_NE(entry(r, "down").reason.find("not int8: min SQNR 8 <= 20"), std::string::npos) << entry(r, "down").reason;
  // The gradient operand of a bf16 GEMM rounds to nearest too (the policy's sr is int8's).
  EXPECT_EQ(entry(r, "up:wgrad").lhs_format.toString(), "bf16:tensor:rtn");
  EXPECT_EQ(entry(r, "tiny").decision, Decision::kKeep);
  EXPECT_NE(entry(r, "tiny").reason.find("kept f32"), std::string::npos) << entry(r, "tiny").reason;
  // bf16's estimate: 2 bytes per element, the bf16 GEMM rate, conversions at the
  // quantize rate, no rescale of the result.
  const GemmEstimate e = entry(r, "down").estimate;
  const double flops = 2.0 * 2048 * 3072 * 768;
  EXPECT_NEAR(e.high_precision_us, flops / 196e3 + 2, 1e-6);
  EXPECT_NEAR(e.int8_gemm_us, flops / 443e3 + 2, 1e-6);
  EXPECT_NEAR(e.quantization_us, 6.0 * (2048.0 * 3072 + 3072.0 * 768) / 16.3e3 + 4, 1e-6);
  EXPECT_EQ(entry(r, "narrow").decision, Decision::kKeep);
  const std::string text = explainRecipe(r);
  EXPECT_NE(text.find("    bf16       2 GEMMs"), std::string::npos) << text;
  // Kept GEMMs grouped by each scheme's reason, named, where the schemes' reasons differ.
  EXPECT_NE(text.find("kept in high precision:   1 (roofline: not faster quantized)"), std::string::npos) << text;
  EXPECT_NE(text.find("kept in high precision:   1 (int8: failed the threshold; bf16: roofline: not faster "
                      "quantized)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("emulated"), std::string::npos) << text;  // bf16 runs natively
  // The recipe file round-trips its bf16 decisions.
  const Recipe again = parseRecipe(recipeToYaml(r), "r.yaml");
  EXPECT_EQ(entry(again, "down").lhs_format.toString(), "bf16:tensor:rtn");
  // For PyTorch a bf16 GEMM is what autocast runs unconverted: the export keeps it
  // (converting it to float8 would be another recipe).
  const std::string json = recipeToTorchJson(r);
  EXPECT_NE(json.find("\"keep_high_precision\": [\n    \"down\",\n    \"tiny\",\n    \"narrow\"\n  ]"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"quantize\": [\n    \"up\"\n  ]"), std::string::npos) << json;
}

// The same policy on a CPU without bf16 GEMMs is the int8 policy; a GPU, whose GEMMs kept
// run in bf16 already, cannot list bf16.
// pgq's CPU int8 GEMM sums in int32 exactly up to K = 65793 (kCpuInt8MaxK, asserted equal
// to the kernel's bound): a deeper GEMM (a weight gradient over more tokens than that) is
// not quantized to int8 by any path of the generator. It was written in int8 and refused
// only by pgq train. The threshold path keeps it, a scheme list moves on to its next
// scheme, and a rule forcing int8 on it is refused; a GPU target is not limited so.
TEST(Bf16Recipe, AGemmDeeperThanTheInt8SumsIsNotInt8OnACpu) {
  const HardwareModel hw = parseHardwareModel(kAmxCpu, "amx.yaml");
  Profile p;
  p.run.model = "test";
  p.gemms = {gemm("deep", GemmDirection::kBwdWgrad, {1, 768, kCpuInt8MaxK + 1, 768}, 3e3),
             gemm("edge", GemmDirection::kBwdWgrad, {1, 768, kCpuInt8MaxK, 768}, 3e3)};
  const Recipe plain = generateRecipe(p, hw, loadPolicy("F+B"), "p.yaml");
  EXPECT_EQ(entry(plain, "deep").decision, Decision::kKeep);
  EXPECT_NE(entry(plain, "deep").reason.find("K = 65794 is beyond the 65793 that int8 sums exactly in int32"),
            std::string::npos)
      << entry(plain, "deep").reason;
  EXPECT_EQ(entry(plain, "edge").decision, Decision::kQuantize) << entry(plain, "edge").reason;
  EXPECT_NE(explainRecipe(plain).find("K too deep for exact int8 sums"), std::string::npos) << explainRecipe(plain);

  const Recipe mixed =
      generateRecipe(p, hw, loadPolicy(PGQ_SOURCE_DIR "/recipes/policies/int8-bf16.yaml"), "p.yaml");
  EXPECT_EQ(entry(mixed, "deep").lhs_format.element, Element::kBf16) << entry(mixed, "deep").reason;
  EXPECT_NE(entry(mixed, "deep").reason.find("not int8: K = 65794 is beyond"), std::string::npos)
      << entry(mixed, "deep").reason;
  EXPECT_EQ(entry(mixed, "edge").lhs_format.toString(), "int8:channel:sr") << entry(mixed, "edge").reason;

  const std::string rule = R"(name: rule
forward: {quantize: true}
backward: {quantize: true}
rules:
  - {label: "deep", action: quantize}
)";
  try {
    generateRecipe(p, hw, parsePolicy(rule, "pol.yaml"), "p.yaml");
    ADD_FAILURE() << "a rule put a GEMM deeper than the int8 sums in int8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quantizes GEMM 'deep' in"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("whose K = 65794 is beyond the 65793"), std::string::npos) << e.what();
  }
}

TEST(Bf16Recipe, WithoutBf16GemmsThePolicyIsInt8AndGpusCannotListIt) {
  const Policy policy = loadPolicy(PGQ_SOURCE_DIR "/recipes/policies/int8-bf16.yaml");
  const Recipe r = generateRecipe(cpuProfile(), loadHardwareModel("epyc-zen3-2c"), policy, "p.yaml");
  EXPECT_EQ(entry(r, "up").lhs_format.bits, 8);
  EXPECT_EQ(entry(r, "down").decision, Decision::kKeep);
  EXPECT_NE(explainRecipe(r).find("lists bf16 (bf16), which hardware epyc-zen3-2c does not run natively"),
            std::string::npos)
      << explainRecipe(r);
  EXPECT_TRUE(loadHardwareModel("xeon-8480-spr-amx").runsFamily(FormatFamily::kBf16));
  EXPECT_TRUE(loadHardwareModel("epyc-9654-zen4").runsFamily(FormatFamily::kBf16));
  std::string gpu = hardwareToYaml(loadHardwareModel("h100-sxm"));
  const size_t at = gpu.find("formats: [");
  ASSERT_NE(at, std::string::npos) << gpu;
  gpu.insert(at + 10, "bf16, ");
  try {
    parseHardwareModel(gpu, "gpu.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("field 'formats': lists 'bf16', the high precision here"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pgq
