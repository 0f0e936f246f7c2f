// Stage (ii) for GPU targets: hardware presets with FP8 / MXFP8, policies that choose
// among format schemes per GEMM, and the errors for what a target cannot run.
#include <gtest/gtest.h>

#include "plan/hardware.h"
#include "plan/policy.h"
#include "plan/recipe.h"
#include "plan/recipe_generator.h"
#include "plan/sqnr_table.h"
#include "support/errors.h"
#include "tests/plan/recipe_test_util.h"

namespace pgq {
namespace {

// An operand profiled in int8 and in the FP8/MX schemes' formats, with SQNRs given per
// family (per-tensor FP8, MXFP8).
OperandProfile operand(const std::string& side, OperandRole role, double fp8, double mx) {
  OperandProfile o;
  o.side = parseName<GemmOperand>(side);
  o.role = role;
  o.tensor = side + "_tensor";
  auto add = [&](const std::string& f, double s) {
    o.formats.push_back({QuantFormat::parse(f), s, s, s, 1.0 / s, 0, 0});
  };
  add("int8:channel:rtn", 3e4);
  const bool grad = role == OperandRole::kGradient;
  add(grad ? "e5m2:tensor:rtn" : "e4m3:tensor:rtn", fp8);
  add("e4m3:block32:rtn:scale=e8m0", mx);
  return o;
}

GemmProfile gemm(const std::string& label, GemmDirection direction, std::vector<int64_t> shape, OperandRole lhs,
                 double lhs_fp8, double lhs_mx, OperandRole rhs, double rhs_fp8, double rhs_mx) {
  GemmProfile g;
  g.label = label;
  g.direction = direction;
  g.gemm_shape = g.device_shape = shape;
  g.flops = 2 * shape[0] * shape[1] * shape[2] * shape[3];
  g.bytes = 2 * shape[0] * (shape[1] * shape[2] + shape[2] * shape[3] + shape[1] * shape[3]);
  g.operands = {operand("lhs", lhs, lhs_fp8, lhs_mx), operand("rhs", rhs, rhs_fp8, rhs_mx)};
  return g;
}

Profile gpuProfile() {
  Profile p;
  p.run.model = "test";
  p.run.step_ms = 5000;  // a CPU step: meaningless for a GPU target
  using R = OperandRole;
  p.gemms = {
      // Large and well-conditioned: FP8 passes.
      gemm("layer0/mlp/up", GemmDirection::kFwd, {1, 8192, 4096, 16384}, R::kActivation, 900, 1500, R::kWeight, 1000,
           1600),
      // An activation spike: per-tensor FP8 fails the forward threshold, MX blocks pass.
      gemm("layer0/mlp/down", GemmDirection::kFwd, {1, 8192, 16384, 4096}, R::kActivation, 12, 800, R::kWeight, 1000,
           1600),
      // Fails both: high precision.
      gemm("get_logits", GemmDirection::kFwd, {1, 8192, 4096, 50304}, R::kActivation, 5, 8, R::kWeight, 1000, 1600),
      // Too small to pay off on the roofline.
      gemm("small", GemmDirection::kFwd, {1, 64, 64, 64}, R::kActivation, 900, 1500, R::kWeight, 1000, 1600),
      // K = 1000 is not a multiple of MX's block of 32.
      gemm("odd", GemmDirection::kFwd, {1, 8192, 1000, 8192}, R::kActivation, 12, 800, R::kWeight, 1000, 1600),
  };
  return p;
}

using testing::entry;

TEST(GpuHardware, PresetsRunTheirFormatsAndRoundTrip) {
  for (const char* name : {"h100-sxm", "mi300x", "b200"}) {
    SCOPED_TRACE(name);
    HardwareModel hw = loadHardwareModel(name);
    EXPECT_EQ(hw.high_precision, DType::kBF16);
    EXPECT_TRUE(hw.runsFamily(FormatFamily::kFp8));
    EXPECT_GT(hw.gemm_fp8, hw.gemm_bf16 * 1.9);  // FP8 tensor cores are twice bf16's
    EXPECT_EQ(hardwareToYaml(parseHardwareModel(hardwareToYaml(hw), "again")), hardwareToYaml(hw));
  }
  EXPECT_FALSE(loadHardwareModel("h100-sxm").runsFamily(FormatFamily::kMxfp8));
  EXPECT_TRUE(loadHardwareModel("b200").runsFamily(FormatFamily::kMxfp8));
  EXPECT_FALSE(loadHardwareModel("epyc-zen3-2c").runsFamily(FormatFamily::kFp8));
  // H100 dense peaks from the datasheet's sparse figures.
  EXPECT_DOUBLE_EQ(loadHardwareModel("h100-sxm").peak_fp8, 1979000);
  EXPECT_DOUBLE_EQ(loadHardwareModel("h100-sxm").peak_bf16, 989500);
}

TEST(GpuHardware, BadFp8FieldsNameTheField) {
  const std::string base = R"(name: x
threads: 1
peak_gflops: {f32: 100, bf16: 200, int8: 400}
gemm_gflops: {f32: 90, bf16: 180, int8: 360}
memory_bandwidth_gbs: 10
quantize_gbs: {rtn: 5, sr: 5}
int8: {vnni: true, max_bits_one: 8, max_bits_both: 8}
)";
  auto message = [&](const std::string& extra) {
    try {
      parseHardwareModel(base + extra, "hw.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("formats: [int8, fp8]\n").find("hw.yaml:8: field 'formats'"), std::string::npos)
      << message("formats: [int8, fp8]\n");
  EXPECT_NE(message("formats: [int8, fp4]\n").find("unknown format family 'fp4'"), std::string::npos);
  EXPECT_NE(message("high_precision: f16\n").find("high_precision"), std::string::npos);
}

// A policy rule that quantizes a GEMM without naming formats takes the policy's first
// scheme: its MX block must divide K as on the scheme path. `odd` (K = 1000) was written
// in mxfp8 and refused only by pgq train; the reason said "int8" (session 17's hunt).
TEST(GpuRecipe, ARuleQuantizingWithTheSchemesFormatsIsCheckedAsTheSchemeIs) {
  const std::string rule = R"(name: rule
formats: [mxfp8]
forward: {quantize: true}
backward: {quantize: true}
rules:
  - {label: "odd", action: quantize}
  - {label: "layer0/mlp/down", action: quantize}
)";
  try {
    generateRecipe(gpuProfile(), loadHardwareModel("b200"), parsePolicy(rule, "pol.yaml"), "p.yaml");
    ADD_FAILURE() << "an MX block that does not divide K was written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quantizes GEMM 'odd' in e4m3:block32:rtn:scale=e8m0"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("does not divide its K = 1000"), std::string::npos) << e.what();
  }
  std::string fits = rule;
  fits.erase(fits.find("  - {label: \"odd\""), std::string("  - {label: \"odd\", action: quantize}\n").size());
  Recipe r = generateRecipe(gpuProfile(), loadHardwareModel("b200"), parsePolicy(fits, "pol.yaml"), "p.yaml");
  EXPECT_NE(entry(r, "layer0/mlp/down").reason.find("policy rule (label ~ layer0/mlp/down): e4m3:block32"),
            std::string::npos)
      << entry(r, "layer0/mlp/down").reason;
}

TEST(GpuRecipe, ChoosesAmongBf16Fp8AndMxfp8PerGemm) {
  Recipe r = generateRecipe(gpuProfile(), loadHardwareModel("b200"), loadPolicy(PGQ_SOURCE_DIR "/recipes/policies/gpu-auto.yaml"),
                            "p.yaml");
  EXPECT_EQ(entry(r, "layer0/mlp/up").lhs_format.toString(), "e4m3:tensor:rtn");
  EXPECT_EQ(entry(r, "layer0/mlp/down").lhs_format.toString(), "e4m3:block32:rtn:scale=e8m0");
  EXPECT_NE(entry(r, "layer0/mlp/down").reason.find("not fp8: min SQNR 12 <= 20"), std::string::npos)
      << entry(r, "layer0/mlp/down").reason;
  EXPECT_EQ(entry(r, "get_logits").decision, Decision::kKeep);
  EXPECT_NE(entry(r, "get_logits").reason.find("kept bf16"), std::string::npos) << entry(r, "get_logits").reason;
  EXPECT_EQ(entry(r, "small").decision, Decision::kKeep);
  EXPECT_NE(entry(r, "odd").reason.find("block 32 does not divide K = 1000"), std::string::npos)
      << entry(r, "odd").reason;
  // The speedup is the target's (bf16 -> FP8 tensor cores), not this CPU's.
  EXPECT_GT(entry(r, "layer0/mlp/up").est_speedup, 1.5);
  EXPECT_EQ(r.summary.measured_step_ms, 0.0);
  std::string text = explainRecipe(r);
  EXPECT_NE(text.find("emulated on CPUs"), std::string::npos) << text;
  EXPECT_NE(text.find("mxfp8"), std::string::npos) << text;
  // The recipe file says which family each GEMM runs in, and reads back.
  std::string yaml = recipeToYaml(r);
  EXPECT_NE(yaml.find("decision: mxfp8"), std::string::npos);
  // (The summary's derived speedup is recomputed from 6-digit times, so the first
  // read may move its last digit; from then on the text is stable.)
  std::string again = recipeToYaml(parseRecipe(yaml, "r.yaml"));
  EXPECT_EQ(again.substr(again.find("gemms:")), yaml.substr(yaml.find("gemms:")));
  EXPECT_EQ(recipeToYaml(parseRecipe(again, "r.yaml")), again);
}

// FP8 and MX tensor-core GEMMs need K and N multiples of 16 (cuBLASLt, torch._scaled_mm;
// Transformer Engine asserts it): such a GEMM stays in bf16, naming the dims, where
// pgq's roofline had given an FP8 estimate for a GEMM the trainer cannot run (session 15's
// note). An aligned GEMM of the same size is still quantized.
TEST(GpuRecipe, KeepsGemmsWhoseDimsTheTensorCoresCannotTake) {
  Profile p = gpuProfile();
  using R = OperandRole;
  p.gemms = {gemm("aligned", GemmDirection::kFwd, {1, 8192, 4096, 8192}, R::kActivation, 900, 1500, R::kWeight, 1000,
                  1600),
             gemm("vocab", GemmDirection::kFwd, {1, 8192, 4096, 50257}, R::kActivation, 900, 1500, R::kWeight, 1000,
                  1600)};
  for (const char* hw : {"h100-sxm", "b200"}) {
    SCOPED_TRACE(hw);
    Recipe r = generateRecipe(p, loadHardwareModel(hw), loadPolicy(PGQ_SOURCE_DIR "/recipes/policies/gpu-auto.yaml"),
                              "p.yaml");
    EXPECT_EQ(entry(r, "aligned").decision, Decision::kQuantize);
    EXPECT_EQ(entry(r, "vocab").decision, Decision::kKeep);
    EXPECT_NE(entry(r, "vocab").reason.find("fp8: K = 4096 and N = 50257 must be multiples of 16"), std::string::npos)
        << entry(r, "vocab").reason;
  }
}

// --explain lists every GEMM's estimate as the decision used it: on a GPU model, the
// bf16 GEMM, the FP8 GEMM alone and the operands' casts of the measured-shape model
// (estimateGpuGemm, which tests/plan/gpu_model_test.cc holds to the H100's tables).
TEST(GpuRecipe, ExplainShowsEachGemmsEstimatedTimes) {
  const HardwareModel hw = loadHardwareModel("h100-sxm");
  const Recipe r = generateRecipe(gpuProfile(), hw, loadPolicy(PGQ_SOURCE_DIR "/recipes/policies/fp8-delayed.yaml"), "p.yaml");
  const RecipeEntry& up = entry(r, "layer0/mlp/up");
  ASSERT_EQ(up.decision, Decision::kQuantize);
  const GpuGemmEstimate gpu = estimateGpuGemm(hw, {1, 8192, 4096, 16384});
  EXPECT_DOUBLE_EQ(up.estimate.high_precision_us, gpu.bf16_us);
  EXPECT_DOUBLE_EQ(up.estimate.int8_gemm_us, gpu.fp8_us);
  EXPECT_GT(up.estimate.quantization_us, 0);
  const std::string row = fmt::format("    {:<34} {:>20} {:>9.1f} {:>11.1f} {:>9.1f} {:>7.2f}x  fp8\n", "layer0/mlp/up",
                                      "8192,4096,16384", gpu.bf16_us, gpu.fp8_us, up.estimate.quantization_us,
                                      up.estimate.speedup());
  const std::string text = explainRecipe(r);
  EXPECT_NE(text.find("per-GEMM estimates on h100-sxm (us;"), std::string::npos) << text;
  EXPECT_NE(text.find(row), std::string::npos) << row << text;
  EXPECT_NE(text.find("    small "), std::string::npos) << text;  // kept GEMMs are listed too
}

TEST(GpuRecipe, DelayedScalingGoesIntoTheRecipe) {
  Recipe r = generateRecipe(gpuProfile(), loadHardwareModel("h100-sxm"),
                            loadPolicy(PGQ_SOURCE_DIR "/recipes/policies/fp8-delayed.yaml"), "p.yaml");
  const RecipeEntry& up = entry(r, "layer0/mlp/up");
  EXPECT_EQ(up.lhs_format.toString(), "e4m3:tensor:rtn");
  EXPECT_EQ(up.amax_history, 16);
  EXPECT_NE(recipeToYaml(r).find("amax_history: 16"), std::string::npos);
}

// A model fitted to measured GEMMs (h100-sxm) notes GEMMs far outside the shapes it was
// measured on; a datasheet model (b200) has none to compare with.
TEST(GpuRecipe, SaysWhenEstimatesExtrapolateTheMeasuredShapes) {
  const Policy policy = loadPolicy(PGQ_SOURCE_DIR "/recipes/policies/fp8-delayed.yaml");
  const std::string note = "lie more than 2x outside the shapes hardware h100-sxm was measured on";
  EXPECT_EQ(explainRecipe(generateRecipe(gpuProfile(), loadHardwareModel("h100-sxm"), policy, "p.yaml")).find(note),
            std::string::npos);
  // 16x the tokens: M = 131072, 4x the largest measured M.
  std::string text =
      explainRecipe(generateRecipe(scaleTokens(gpuProfile(), 16), loadHardwareModel("h100-sxm"), policy, "p.yaml"));
  EXPECT_NE(text.find(note), std::string::npos) << text;
  EXPECT_NE(text.find("(up to 4x in a dimension)"), std::string::npos) << text;
  EXPECT_EQ(explainRecipe(generateRecipe(scaleTokens(gpuProfile(), 16), loadHardwareModel("b200"), policy, "p.yaml"))
                .find("outside the shapes"),
            std::string::npos);
}

TEST(GpuRecipe, FormatsTheTargetCannotRunAreRefused) {
  // A policy choosing between FP8 and MXFP8 on a Hopper GPU: MXFP8 is skipped, said so.
  Recipe hopper = generateRecipe(gpuProfile(), loadHardwareModel("h100-sxm"),
                                 loadPolicy(PGQ_SOURCE_DIR "/recipes/policies/gpu-auto.yaml"), "p.yaml");
  EXPECT_EQ(entry(hopper, "layer0/mlp/up").lhs_format.toString(), "e4m3:tensor:rtn");
  EXPECT_EQ(entry(hopper, "layer0/mlp/down").decision, Decision::kKeep);
  EXPECT_NE(explainRecipe(hopper).find("note: policy gpu-auto lists mxfp8 (mxfp8), which hardware h100-sxm does not run "
                                       "natively (it runs: int8, fp8): skipped"),
            std::string::npos)
      << explainRecipe(hopper);
  // A policy asking only for MXFP8 there.
  try {
    generateRecipe(gpuProfile(), loadHardwareModel("h100-sxm"), loadPolicy(PGQ_SOURCE_DIR "/recipes/policies/mxfp8.yaml"),
                   "p.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("field 'formats' asks for mxfp8, none of which hardware 'h100-sxm' runs"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("h100-sxm"), std::string::npos) << e.what();
  }
  // A CPU model without FP8 asked for FP8.
  EXPECT_THROW(generateRecipe(gpuProfile(), loadHardwareModel("epyc-zen3-2c"),
                              loadPolicy(PGQ_SOURCE_DIR "/recipes/policies/fp8-delayed.yaml"), "p.yaml"),
               Error);
  // A recipe entry in a format the hardware does not run names the GEMM and the format.
  Recipe recipe = parseRecipe(R"(gemms:
  - {label: up, decision: mxfp8, lhs_format: mxfp8_e4m3, rhs_format: mxfp8_e4m3}
)",
                              "r.yaml");
  try {
    checkRecipeRunsExactly(recipe, loadHardwareModel("h100-sxm"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("r.yaml:2: GEMM 'up': format e4m3:block32:rtn:scale=e8m0 (mxfp8) does not run"),
              std::string::npos)
        << e.what();
  }
}

TEST(GpuRecipe, BadScalingFieldsNameTheFileAndField) {
  auto message = [](const std::string& text) {
    try {
      parseRecipe(text, "r.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = message(
      "gemms:\n  - {label: up, decision: fp8, lhs_format: \"e4m3:tensor:rtn\", rhs_format: \"e4m3:tensor:rtn\", "
      "amax_history: 0}\n");
  EXPECT_NE(m.find("r.yaml:2"), std::string::npos) << m;
  EXPECT_NE(m.find("amax_history"), std::string::npos) << m;
  m = message(
      "gemms:\n  - {label: up, decision: mxfp8, lhs_format: mxfp8_e4m3, rhs_format: mxfp8_e4m3, amax_history: 4}\n");
  EXPECT_NE(m.find("per-tensor FP8"), std::string::npos) << m;
  try {
    parsePolicy("forward: {quantize: true}\nbackward: {quantize: false}\nformats: [mxfp8]\nscaling: {amax_history: 8}\n",
                "p.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("p.yaml"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parsePolicy("forward: {quantize: true}\nbackward: {quantize: false}\nformats: [fp8]\nscaling: "
                           "{amax_history: -1}\n",
                           "p.yaml"),
               Error);
  EXPECT_THROW(parsePolicy("forward: {quantize: true}\nbackward: {quantize: false}\nformats: [fp4]\n", "p.yaml"), Error);
}

TEST(SqnrComparison, RanksEveryInputPerFormatAndFindsTheMovers) {
  Profile p = gpuProfile();
  // `odd`'s activation: as low as down's in FP8 (12), but the best of all in MXFP8.
  p.gemms[4].operands[0].formats[2].sqnr_mean = 2000;
  SqnrComparison c = compareSqnr(p, {"fp8", "mxfp8"});
  ASSERT_EQ(c.rows.size(), 10u);
  // Lowest in per-tensor FP8: get_logits' activation (5), then the spiky inputs (12).
  EXPECT_EQ(c.rows[0].label, "get_logits");
  EXPECT_EQ(c.rows[0].formats[0].toString(), "e4m3:tensor:rtn");
  EXPECT_EQ(c.rows[0].formats[1].toString(), "e4m3:block32:rtn:scale=e8m0");
  EXPECT_EQ(c.rows[0].rank[0], 1);
  EXPECT_EQ(c.rows[0].rank[1], 1);  // 8 is still the lowest in MXFP8
  const CompareRow* odd = nullptr;
  for (const CompareRow& r : c.rows)
    if (r.label == "odd" && r.side == GemmOperand::kLhs) odd = &r;
  ASSERT_NE(odd, nullptr);
  EXPECT_EQ(odd->rank[0], 3);
  EXPECT_EQ(odd->rank[1], 10);
  EXPECT_EQ(odd->maxRankShift(), 7);
  // MXFP8's ranking against FP8's: `odd`'s activation moves from 3 to 10, which moves the
  // seven inputs ranked 4..10 in FP8 one place down, so sum d^2 = 49 + 7 and
  // rho = 1 - 6 * 56 / (10 * (10^2 - 1)).
  ASSERT_EQ(c.spearman.size(), 2u);
  EXPECT_DOUBLE_EQ(c.spearman[1], 1.0 - 6.0 * 56.0 / 990.0);
  std::string text = sqnrComparisonMarkdown(c, 3);
  EXPECT_NE(text.find("largest rank shifts"), std::string::npos) << text;
  EXPECT_NE(sqnrComparisonCsv(c).find("fp8_sqnr"), std::string::npos);
  // A format the profile lacks names the flag that records it.
  try {
    compareSqnr(p, {"moss_fp8"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--profile-formats moss_fp8"), std::string::npos) << e.what();
  }
}

// A column named by a format (not a scheme) compares every operand in that format,
// gradients too. They were read in a default format instead: both columns of a gradient
// showed the same SQNR, under different ranks.
TEST(SqnrComparison, AFormatColumnComparesGradientsInThatFormat) {
  Profile p = gpuProfile();
  GemmProfile dgrad = gemm("layer0/mlp/down:dgrad", GemmDirection::kBwdDgrad, {1, 8192, 4096, 16384},
                           OperandRole::kGradient, 40, 300, OperandRole::kWeight, 1000, 1600);
  p.gemms.push_back(dgrad);
  SqnrComparison c = compareSqnr(p, {"int8:channel:rtn", "e4m3:block32:rtn:scale=e8m0"});
  const CompareRow* gradient = nullptr;
  for (const CompareRow& r : c.rows)
    if (r.label == dgrad.label && r.role == OperandRole::kGradient) gradient = &r;
  ASSERT_NE(gradient, nullptr);
  EXPECT_EQ(gradient->formats[0].toString(), "int8:channel:rtn");
  EXPECT_EQ(gradient->formats[1].toString(), "e4m3:block32:rtn:scale=e8m0");
  EXPECT_DOUBLE_EQ(gradient->sqnr[0], 3e4);
  EXPECT_DOUBLE_EQ(gradient->sqnr[1], 300);
}

}  // namespace
}  // namespace pgq
