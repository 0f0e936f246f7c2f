// Stage (ii) with the 4-bit formats: FP4 hardware presets, the recipe generator choosing
// among NVFP4, MXFP8, FP8 and bf16 per GEMM and direction, and what Hopper refuses.
#include <gtest/gtest.h>

#include "plan/hardware.h"
#include "plan/policy.h"
#include "plan/recipe.h"
#include "plan/recipe_generator.h"
#include "support/errors.h"
#include "tests/plan/recipe_test_util.h"

namespace pgq {
namespace {

const std::string kPolicy = PGQ_SOURCE_DIR "/recipes/policies/nvfp4.yaml";

// An operand profiled in every format the nvfp4 policy's schemes can give it, both
// roundings, with and without the transform: SQNR fp4 for the 4-bit formats, mx for
// MXFP8, fp8 for per-tensor FP8.
OperandProfile operand(const std::string& side, OperandRole role, double fp4, double mx, double fp8) {
  OperandProfile o;
  o.side = parseName<GemmOperand>(side);
  o.role = role;
  o.tensor = side + "_tensor";
  auto add = [&](std::string head, std::string tail, double s) {
    for (const char* rounding : {"rtn", "sr"})
      for (const char* rht : {"", ":rht"})
        o.formats.push_back({QuantFormat::parse(head + ":" + rounding + tail + (head[1] == '2' ? rht : "")), s, s, s,
                             1.0 / s, 0, 0});
  };
  add("e2m1:block16", ":scale=e4m3", fp4);
  add("e2m1:block16x16", ":scale=e4m3", fp4 * 0.9);
  add("e4m3:block32", ":scale=e8m0", mx);
  add(role == OperandRole::kGradient ? "e5m2:tensor" : "e4m3:tensor", "", fp8);
  return o;
}

GemmProfile gemm(const std::string& label, GemmDirection direction, std::vector<int64_t> shape, OperandRole lhs,
                 OperandRole rhs, double fp4, double mx = 1500, double fp8 = 900) {
  GemmProfile g;
  g.label = label;
  g.direction = direction;
  g.gemm_shape = g.device_shape = shape;
  g.flops = 2 * shape[0] * shape[1] * shape[2] * shape[3];
  g.bytes = 2 * shape[0] * (shape[1] * shape[2] + shape[2] * shape[3] + shape[1] * shape[3]);
  g.operands = {operand("lhs", lhs, fp4, mx, fp8), operand("rhs", rhs, fp4, mx, fp8)};
  if (isBackward(direction)) g.grad_of = "layer0/mlp/up";
  return g;
}

Profile fp4Profile() {
  Profile p;
  p.run.model = "test";
  using R = OperandRole;
  using D = GemmDirection;
  p.gemms = {
      // Forward passes 30 in NVFP4.
      gemm("layer0/mlp/up", D::kFwd, {1, 8192, 4096, 16384}, R::kActivation, R::kWeight, 60),
      // dgrad: NVFP4 fails the backward threshold 15, MXFP8 takes it.
      gemm("layer0/mlp/up:dgrad", D::kBwdDgrad, {1, 8192, 16384, 4096}, R::kGradient, R::kWeight, 10),
      // wgrad passes in NVFP4, with the transform on both operands.
      gemm("layer0/mlp/up:wgrad", D::kBwdWgrad, {1, 4096, 8192, 16384}, R::kActivation, R::kGradient, 40),
      // The logits: kept by the policy's rule.
      gemm("get_logits", D::kFwd, {1, 8192, 4096, 50304}, R::kActivation, R::kWeight, 60),
      // An imported model's untied head (Hugging Face's lm_head), and its weight gradient.
      gemm("lm_head", D::kFwd, {1, 8192, 4096, 50304}, R::kActivation, R::kWeight, 60),
      gemm("lm_head:wgrad", D::kBwdWgrad, {1, 4096, 8192, 50304}, R::kActivation, R::kGradient, 40),
  };
  p.gemms[3].grad_of.clear();
  p.gemms[4].grad_of.clear();
  p.gemms[5].grad_of = "lm_head";
  return p;
}

using testing::entry;

TEST(Fp4Hardware, PresetsGiveTheirDatasheetFp4Rates) {
  const HardwareModel b200 = loadHardwareModel("b200"), gb300 = loadHardwareModel("gb300"),
                      mi355x = loadHardwareModel("mi355x");
  EXPECT_EQ(b200.peak_fp4, 9e6);
  EXPECT_EQ(gb300.peak_fp4, 15e6);
  EXPECT_EQ(mi355x.peak_fp4, 10e6);
  for (const HardwareModel* hw : {&b200, &gb300, &mi355x}) {
    SCOPED_TRACE(hw->name);
    EXPECT_NE(hw->source.find("datasheet"), std::string::npos);
    EXPECT_TRUE(hw->runsFamily(FormatFamily::kMxfp4));
    EXPECT_EQ(hardwareToYaml(parseHardwareModel(hardwareToYaml(*hw), "again")), hardwareToYaml(*hw));
  }
  EXPECT_TRUE(b200.runsFamily(FormatFamily::kNvfp4));
  EXPECT_FALSE(mi355x.runsFamily(FormatFamily::kNvfp4));  // CDNA 4 has OCP MX only
  for (const char* hopper : {"h100-sxm", "h200"}) EXPECT_FALSE(loadHardwareModel(hopper).runsFamily(FormatFamily::kNvfp4));
  // A 4-bit GEMM moves half a byte per element and runs at the FP4 rate.
  const QuantFormat nv = QuantFormat::parse("nvfp4"), e4m3 = QuantFormat::parse("e4m3:tensor:rtn");
  const std::vector<int64_t> shape{1, 8192, 8192, 8192};
  EXPECT_LT(estimateGemm(b200, shape, DType::kBF16, nv, nv).int8_gemm_us,
            0.6 * estimateGemm(b200, shape, DType::kBF16, e4m3, e4m3).int8_gemm_us);
  // The transform costs its 16x16 products in the cast.
  QuantFormat rht = nv;
  rht.hadamard = true;
  EXPECT_GT(estimateGemm(b200, shape, DType::kBF16, rht, rht).quantization_us,
            estimateGemm(b200, shape, DType::kBF16, nv, nv).quantization_us);
  // A preset listing an FP4 family without an FP4 rate is refused by field.
  try {
    parseHardwareModel("name: x\nthreads: 1\npeak_gflops: {f32: 1, bf16: 2, int8: 4, fp8: 4}\ngemm_gflops: {f32: 1, bf16: 2, "
                       "int8: 4, fp8: 4}\nmemory_bandwidth_gbs: 1\nquantize_gbs: {rtn: 1, sr: 1}\nformats: [fp8, nvfp4]\n"
                       "int8: {vnni: true, max_bits_one: 8, max_bits_both: 8}\n",
                       "x.yaml");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("formats"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no fp4 rate"), std::string::npos) << e.what();
  }
}

TEST(Fp4Recipe, ChoosesPerGemmAndDirectionAndExplainsEveryDecision) {
  const Recipe r = generateRecipe(fp4Profile(), loadHardwareModel("b200"), loadPolicy(kPolicy), "p.yaml");
  const RecipeEntry& fwd = entry(r, "layer0/mlp/up");
  ASSERT_EQ(fwd.decision, Decision::kQuantize) << fwd.reason;
  EXPECT_EQ(fwd.lhs_format.toString(), "e2m1:block16:rtn:scale=e4m3");
  EXPECT_EQ(fwd.rhs_format.toString(), "e2m1:block16x16:rtn:scale=e4m3");  // the weight's 2-D tiles
  const RecipeEntry& dgrad = entry(r, "layer0/mlp/up:dgrad");
  ASSERT_EQ(dgrad.decision, Decision::kQuantize) << dgrad.reason;
  EXPECT_EQ(formatFamily(dgrad.lhs_format), FormatFamily::kMxfp8) << dgrad.reason;
  const RecipeEntry& wgrad = entry(r, "layer0/mlp/up:wgrad");
  ASSERT_EQ(wgrad.decision, Decision::kQuantize) << wgrad.reason;
  EXPECT_EQ(wgrad.lhs_format.toString(), "e2m1:block16:rtn:scale=e4m3:rht");
  EXPECT_EQ(wgrad.rhs_format.toString(), "e2m1:block16:sr:scale=e4m3:rht");  // SR on the gradient
  EXPECT_EQ(entry(r, "get_logits").decision, Decision::kKeep);
  // Session 15: the rule named only the tied head; an untied one was quantized to NVFP4.
  EXPECT_EQ(entry(r, "lm_head").decision, Decision::kKeep) << entry(r, "lm_head").reason;
  EXPECT_EQ(entry(r, "lm_head:wgrad").decision, Decision::kKeep) << entry(r, "lm_head:wgrad").reason;
  const std::string text = explainRecipe(r);
  for (const RecipeEntry& e : r.entries) EXPECT_NE(text.find(e.label), std::string::npos) << e.label << "\n" << text;
  EXPECT_NE(dgrad.reason.find("nvfp4"), std::string::npos) << dgrad.reason;  // why NVFP4 did not take it
}

TEST(Fp4Recipe, HopperRefusesAFourBitPolicyNamingFileAndField) {
  for (const char* hopper : {"h100-sxm", "h200"}) {
    try {
      generateRecipe(fp4Profile(), loadHardwareModel(hopper), loadPolicy(kPolicy), "p.yaml");
      ADD_FAILURE() << hopper << ": no error";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(kPolicy), std::string::npos) << what;
      EXPECT_NE(what.find("field 'formats' lists nvfp4"), std::string::npos) << what;
      EXPECT_NE(what.find(hopper), std::string::npos) << what;
    }
  }
  // The transform applies to 4-bit schemes only.
  EXPECT_THROW(parsePolicy("name: p\nforward: {quantize: true}\nbackward: {quantize: false}\nformats: [fp8]\n"
                           "hadamard: bwd_wgrad\n",
                           "p.yaml"),
               Error);
}

// K = 1000 is a multiple of neither the NVFP4 block nor the transform's 16: NVFP4 does not
// take the GEMM (the next scheme may), and a recipe file asking for it is refused.
TEST(Fp4Recipe, KThatTheBlocksDoNotDivideIsRefused) {
  Profile p = fp4Profile();
  p.gemms[2].device_shape = p.gemms[2].gemm_shape = {1, 4096, 1000, 16384};
  const Recipe r = generateRecipe(p, loadHardwareModel("b200"), loadPolicy(kPolicy), "p.yaml");
  const RecipeEntry& wgrad = entry(r, "layer0/mlp/up:wgrad");
  EXPECT_NE(formatFamily(wgrad.lhs_format), FormatFamily::kNvfp4);
  EXPECT_NE(wgrad.reason.find("block 16 does not divide K = 1000"), std::string::npos) << wgrad.reason;
}

}  // namespace
}  // namespace pgq
