#include "plan/recipe_export.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "support/errors.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;

RecipeEntry quantized(const std::string& label, const std::string& lhs, const std::string& rhs, double smooth = 0) {
  RecipeEntry e;
  e.label = label;
  e.decision = Decision::kQuantize;
  e.lhs_format = QuantFormat::parse(lhs);
  e.rhs_format = QuantFormat::parse(rhs);
  e.smooth = smooth;
  e.reason = label + ": quantized";
  return e;
}

RecipeEntry kept(const std::string& label, const std::string& reason = "kept f32") {
  RecipeEntry e;
  e.label = label;
  e.decision = Decision::kKeep;
  e.reason = reason;
  return e;
}

// What generation records of each GEMM (RecipeEntry::gemm): a forward GEMM's operand
// roles (a Linear's x.W, or attention's two activations), and a backward GEMM's
// direction and forward GEMM.
constexpr OperandRoles kLinear = {OperandRole::kActivation, OperandRole::kWeight};
constexpr OperandRoles kBatched = {OperandRole::kActivation, OperandRole::kActivation};

RecipeEntry fwd(RecipeEntry e, OperandRoles roles = kLinear) {
  e.gemm = EntryGemm{GemmDirection::kFwd, roles, ""};
  return e;
}

RecipeEntry dgrad(RecipeEntry e, const std::string& forward) {
  e.gemm = EntryGemm{GemmDirection::kBwdDgrad, {OperandRole::kGradient, OperandRole::kWeight}, forward};
  return e;
}

RecipeEntry wgrad(RecipeEntry e, const std::string& forward) {
  e.gemm = EntryGemm{GemmDirection::kBwdWgrad, {OperandRole::kActivation, OperandRole::kGradient}, forward};
  return e;
}

// The GEMMs of one GPT-2 block as pgq labels them after importing its ONNX export
// (tests/onnx/models.py): Linear modules qkv, proj, mlp.0 and mlp.2 (nn.Sequential
// entries), attention's batched GEMMs in Gpt2Attention's own forward (`blocks.0/attn`
// and `blocks.0/attn/MatMul_1`, both operands activations), an untied head.
Recipe gpt2Recipe() {
  const std::string e4m3 = "e4m3:tensor:rtn", e5m2_sr = "e5m2:tensor:sr", mx = "e4m3:block32:rtn:scale=e8m0";
  Recipe r;
  r.name = "F+B_SR";
  r.policy = "F+B_SR";
  r.model = "gpt2";
  r.hardware = "h100";
  r.profile = "p.yaml";
  r.entries = {
      // All three GEMMs in FP8.
      fwd(quantized("blocks.0/attn/qkv", e4m3, e4m3)),
      dgrad(quantized("blocks.0/attn/qkv:dgrad", e5m2_sr, e4m3), "blocks.0/attn/qkv"),
      wgrad(quantized("blocks.0/attn/qkv:wgrad", e4m3, e5m2_sr), "blocks.0/attn/qkv"),
      // Attention's q.k^T and p.v: no module GEMMs.
      fwd(quantized("blocks.0/attn", e4m3, e4m3), kBatched),
      dgrad(kept("blocks.0/attn:dgrad_lhs"), "blocks.0/attn"),
      dgrad(kept("blocks.0/attn:dgrad_rhs"), "blocks.0/attn"),
      fwd(kept("blocks.0/attn/MatMul_1"), kBatched),
      dgrad(kept("blocks.0/attn/MatMul_1:dgrad_lhs"), "blocks.0/attn/MatMul_1"),
      dgrad(kept("blocks.0/attn/MatMul_1:dgrad_rhs"), "blocks.0/attn/MatMul_1"),
      // Forward quantized (MXFP8), the weight gradient kept.
      fwd(quantized("blocks.0/attn/proj", mx, mx)),
      dgrad(quantized("blocks.0/attn/proj:dgrad", mx, mx), "blocks.0/attn/proj"),
      wgrad(kept("blocks.0/attn/proj:wgrad", "bwd_wgrad, min SQNR 0.5 <= 1: kept f32"), "blocks.0/attn/proj"),
      // Forward kept, the input gradient quantized.
      fwd(kept("blocks.0/mlp/mlp.0", "fwd, min SQNR 3 <= 20: \"kept\" f32\n(low)")),
      dgrad(quantized("blocks.0/mlp/mlp.0:dgrad", "int8:channel:sr", "int7:channel:rtn"), "blocks.0/mlp/mlp.0"),
      wgrad(kept("blocks.0/mlp/mlp.0:wgrad"), "blocks.0/mlp/mlp.0"),
      // SmoothQuant, and a frozen weight: no wgrad.
      fwd(quantized("blocks.0/mlp/mlp.2", "int8:channel:rtn", "int7:channel:rtn", 0.5)),
      dgrad(quantized("blocks.0/mlp/mlp.2:dgrad", "int8:channel:sr", "int7:channel:rtn"), "blocks.0/mlp/mlp.2"),
      fwd(kept("lm_head", "fwd, policy rule (label lm_head): kept f32")),
      dgrad(kept("lm_head:dgrad"), "lm_head"),
      wgrad(kept("lm_head:wgrad"), "lm_head"),
  };
  return r;
}

std::vector<std::string> strings(const YAML::Node& list) {
  std::vector<std::string> out;
  for (const YAML::Node& item : list) out.push_back(item.as<std::string>());
  return out;
}

std::vector<std::string> keys(const YAML::Node& map) {
  std::vector<std::string> out;
  for (const auto& item : map) out.push_back(item.first.as<std::string>());
  return out;
}

TEST(TorchModulePath, ScopesBecomeModuleNames) {
  EXPECT_EQ(torchModulePath("blocks.0/attn/q"), "blocks.0.attn.q");
  EXPECT_EQ(torchModulePath("lm_head"), "lm_head");
  EXPECT_EQ(torchModulePath("layer0/attn/q"), "layer0.attn.q");
  // An nn.Sequential entry's scope repeats its container's: `mlp` then `mlp.0`.
  EXPECT_EQ(torchModulePath("blocks.0/mlp/mlp.0"), "blocks.0.mlp.0");
  EXPECT_EQ(torchModulePath("blocks.0/seq/seq.1/seq.1.0"), "blocks.0.seq.1.0");
  // Only a scope followed by '.' extends the one before it.
  EXPECT_EQ(torchModulePath("mlp/mlpx"), "mlp.mlpx");
  EXPECT_EQ(torchModulePath("mlp/mlp"), "mlp.mlp");
}

TEST(RecipeToTorchJson, GroupsGemmsIntoModules) {
  std::string text = recipeToTorchJson(gpt2Recipe());
  YAML::Node json = YAML::Load(text);  // JSON is YAML
  EXPECT_EQ(json["pgq_recipe"].as<std::string>(), "F+B_SR");
  EXPECT_EQ(json["model"].as<std::string>(), "gpt2");
  EXPECT_EQ(json["hardware"].as<std::string>(), "h100");
  EXPECT_EQ(json["policy"].as<std::string>(), "F+B_SR");
  EXPECT_EQ(keys(json["modules"]), (std::vector<std::string>{"blocks.0.attn.qkv", "blocks.0.attn.proj",
                                                             "blocks.0.mlp.0", "blocks.0.mlp.2", "lm_head"}));
  EXPECT_EQ(strings(json["quantize"]),
            (std::vector<std::string>{"blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.2"}));
  EXPECT_EQ(strings(json["keep_high_precision"]), (std::vector<std::string>{"blocks.0.mlp.0", "lm_head"}));

  YAML::Node qkv = json["modules"]["blocks.0.attn.qkv"];
  EXPECT_EQ(qkv["label"].as<std::string>(), "blocks.0/attn/qkv");
  EXPECT_EQ(qkv["format"].as<std::string>(), "fp8");
  EXPECT_EQ(qkv["forward"].as<std::string>(), "e4m3:tensor:rtn x e4m3:tensor:rtn");
  EXPECT_EQ(qkv["dgrad"].as<std::string>(), "e5m2:tensor:sr x e4m3:tensor:rtn");
  EXPECT_EQ(qkv["wgrad"].as<std::string>(), "e4m3:tensor:rtn x e5m2:tensor:sr");
  EXPECT_TRUE(qkv["keep_reason"].IsNull());
  EXPECT_TRUE(qkv["note"].IsNull());

  // Forward quantized, a backward GEMM kept: quantized, with a note.
  YAML::Node proj = json["modules"]["blocks.0.attn.proj"];
  EXPECT_EQ(proj["format"].as<std::string>(), "mxfp8");
  EXPECT_EQ(proj["wgrad"].as<std::string>(), "keep");
  EXPECT_NE(proj["note"].as<std::string>().find("quantizes the forward GEMM but keeps wgrad in high precision"),
            std::string::npos)
      << proj["note"];

  // Forward kept, a backward GEMM quantized: kept, with the forward's reason and a note.
  YAML::Node mlp0 = json["modules"]["blocks.0.mlp.0"];
  EXPECT_TRUE(mlp0["format"].IsNull());
  EXPECT_EQ(mlp0["forward"].as<std::string>(), "keep");
  EXPECT_EQ(mlp0["dgrad"].as<std::string>(), "int8:channel:sr x int7:channel:rtn");
  EXPECT_EQ(mlp0["keep_reason"].as<std::string>(), "fwd, min SQNR 3 <= 20: \"kept\" f32\n(low)");
  EXPECT_NE(mlp0["note"].as<std::string>().find("quantizes dgrad but keeps the forward GEMM"), std::string::npos)
      << mlp0["note"];

  // No wgrad in the recipe: null; SmoothQuant: a note.
  YAML::Node mlp2 = json["modules"]["blocks.0.mlp.2"];
  EXPECT_EQ(mlp2["format"].as<std::string>(), "int8");
  EXPECT_TRUE(mlp2["wgrad"].IsNull());
  EXPECT_NE(mlp2["note"].as<std::string>().find("SmoothQuant (alpha 0.5) on the forward GEMM"), std::string::npos)
      << mlp2["note"];

  EXPECT_EQ(json["modules"]["lm_head"]["keep_reason"].as<std::string>(), "fwd, policy rule (label lm_head): kept f32");
  EXPECT_TRUE(json["modules"]["lm_head"]["note"].IsNull());

  // Attention's batched GEMMs, in recipe order, with their directions.
  YAML::Node others = json["non_module_gemms"];
  ASSERT_EQ(others.size(), 6u) << text;
  std::vector<std::string> labels, directions;
  for (const YAML::Node& g : others) {
    labels.push_back(g["label"].as<std::string>());
    directions.push_back(g["direction"].as<std::string>());
  }
  EXPECT_EQ(labels, (std::vector<std::string>{"blocks.0/attn", "blocks.0/attn:dgrad_lhs", "blocks.0/attn:dgrad_rhs",
                                              "blocks.0/attn/MatMul_1", "blocks.0/attn/MatMul_1:dgrad_lhs",
                                              "blocks.0/attn/MatMul_1:dgrad_rhs"}));
  EXPECT_EQ(directions, (std::vector<std::string>{"fwd", "bwd_dgrad", "bwd_dgrad", "fwd", "bwd_dgrad", "bwd_dgrad"}));
  EXPECT_EQ(others[0]["decision"].as<std::string>(), "fp8");
  EXPECT_EQ(others[0]["formats"].as<std::string>(), "e4m3:tensor:rtn x e4m3:tensor:rtn");
  EXPECT_EQ(others[1]["decision"].as<std::string>(), "keep");
  EXPECT_TRUE(others[1]["formats"].IsNull());
}

TEST(RecipeToTorchJson, TiedLogitsAndModulesWithoutBackwardGemms) {
  Recipe r;
  r.name = "F";
  r.entries = {fwd(quantized("get_logits", "int8:channel:rtn", "int7:channel:rtn")),
               dgrad(kept("get_logits:dgrad"), "get_logits"), wgrad(kept("get_logits:wgrad"), "get_logits"),
               fwd(quantized("head", "int8:channel:rtn", "int7:channel:rtn"))};
  YAML::Node json = YAML::Load(recipeToTorchJson(r));
  // A tied `x @ wte.weight.T` is no nn.Linear, whatever its operands.
  EXPECT_EQ(json["non_module_gemms"].size(), 3u);
  EXPECT_EQ(json["non_module_gemms"][0]["label"].as<std::string>(), "get_logits");
  EXPECT_EQ(strings(json["quantize"]), std::vector<std::string>{"head"});
  EXPECT_NE(json["modules"]["head"]["note"].as<std::string>().find("no backward GEMM"), std::string::npos);
}

// The grouping reads what generation recorded, not the labels: a forward label with a
// ':' and backward GEMMs labelled any way still make a module.
TEST(RecipeToTorchJson, GroupsByTheRecordedGemmsNotTheLabels) {
  Recipe r;
  r.name = "F+B";
  r.entries = {fwd(quantized("enc:0/fc", "int8:channel:rtn", "int7:channel:rtn")), dgrad(kept("d0"), "enc:0/fc"),
               wgrad(kept("w0"), "enc:0/fc")};
  YAML::Node json = YAML::Load(recipeToTorchJson(r));
  ASSERT_EQ(keys(json["modules"]), std::vector<std::string>{"enc:0.fc"});
  EXPECT_EQ(json["modules"]["enc:0.fc"]["dgrad"].as<std::string>(), "keep");
  EXPECT_EQ(json["modules"]["enc:0.fc"]["wgrad"].as<std::string>(), "keep");
  EXPECT_EQ(json["non_module_gemms"].size(), 0u);
}

TEST(RecipeToTorchJson, EmptyRecipe) {
  Recipe r;
  r.name = "nothing";
  std::string text = recipeToTorchJson(r);
  YAML::Node json = YAML::Load(text);
  EXPECT_EQ(json["modules"].size(), 0u) << text;
  EXPECT_TRUE(json["modules"].IsMap()) << text;
  EXPECT_EQ(json["quantize"].size(), 0u);
  EXPECT_EQ(json["keep_high_precision"].size(), 0u);
  EXPECT_EQ(json["non_module_gemms"].size(), 0u);
  EXPECT_NE(recipeToTorchFilter(r).find("PGQ_QUANTIZE = set()\n"), std::string::npos);
}

TEST(RecipeToTorchJson, RefusesWhatItCannotGroup) {
  Recipe r = parseRecipe("gemms:\n  - {label: a/q, decision: keep}\n  - {match: \"a/.*\", decision: keep}\n", "r.yaml");
  try {
    recipeToTorchJson(r);
    FAIL() << "a recipe read from a file was exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("r.yaml:2: GEMM 'a/q': the PyTorch export needs a recipe generated from a "
                                         "profile"),
              std::string::npos)
        << e.what();
  }
  r.entries[0] = fwd(r.entries[0]);
  try {
    recipeToTorchJson(r);
    FAIL() << "a match entry was exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("r.yaml:3: entry `match: a/.*`: the PyTorch export needs one `label:` entry"),
              std::string::npos)
        << e.what();
  }
  Recipe same;
  same.source = "s.yaml";
  same.entries = {fwd(kept("a/mlp/mlp.0")), fwd(kept("a/mlp.0"))};
  try {
    recipeToTorchFilter(same);
    FAIL() << "two forward GEMMs of one module were exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("s.yaml: GEMMs 'a/mlp/mlp.0' and 'a/mlp.0' both belong to module 'a.mlp.0'"),
              std::string::npos)
        << e.what();
  }
}

TEST(RecipeToTorchFilter, DefinesTheSetsAndTorchaosFilter) {
  std::string py = recipeToTorchFilter(gpt2Recipe());
  EXPECT_NE(py.find("PGQ_QUANTIZE = {\n    \"blocks.0.attn.qkv\",\n    \"blocks.0.attn.proj\",\n    "
                    "\"blocks.0.mlp.2\",\n}\n"),
            std::string::npos)
      << py;
  EXPECT_NE(py.find("PGQ_KEEP_HIGH_PRECISION = {\n    \"blocks.0.mlp.0\",\n    \"lm_head\",\n}\n"), std::string::npos)
      << py;
  EXPECT_NE(py.find("    \"blocks.0.attn.proj\": {\"forward\": \"e4m3:block32:rtn:scale=e8m0 x "
                    "e4m3:block32:rtn:scale=e8m0\", \"dgrad\": \"e4m3:block32:rtn:scale=e8m0 x "
                    "e4m3:block32:rtn:scale=e8m0\", \"wgrad\": \"keep\"},\n"),
            std::string::npos)
      << py;
  EXPECT_NE(py.find("    \"blocks.0.mlp.2\": {\"forward\": \"int8:channel:rtn x int7:channel:rtn\", \"dgrad\": "
                    "\"int8:channel:sr x int7:channel:rtn\", \"wgrad\": None},\n"),
            std::string::npos)
      << py;
  EXPECT_NE(py.find("def module_filter_fn(module, fqn):\n"), std::string::npos) << py;
  EXPECT_NE(py.find("    return fqn in PGQ_QUANTIZE\n"), std::string::npos) << py;
  // The hints name the families the quantized modules use.
  EXPECT_NE(py.find("#   fp8: DelayedScaling"), std::string::npos) << py;
  EXPECT_NE(py.find("#   mxfp8: MXFP8BlockScaling"), std::string::npos) << py;
  EXPECT_NE(py.find("#   int8: no Transformer Engine"), std::string::npos) << py;
  // Batched GEMMs are not modules.
  EXPECT_EQ(py.find("\"blocks.0.attn\""), std::string::npos) << py;
  // TE's FP8 format follows the gradients: HYBRID with E5M2 ones, E4M3 when every one is
  // E4M3 (session 15: it said HYBRID for an fp8_e4m3 recipe).
  EXPECT_NE(py.find("DelayedScaling(fp8_format=Format.HYBRID)):\n"), std::string::npos) << py;
  Recipe e4m3 = gpt2Recipe();
  for (RecipeEntry& e : e4m3.entries)
    for (QuantFormat* f : {&e.lhs_format, &e.rhs_format})
      if (f->element == Element::kE5M2) *f = QuantFormat::parse("e4m3:tensor:rtn");
  const std::string py_e4m3 = recipeToTorchFilter(e4m3);
  EXPECT_NE(py_e4m3.find("#   fp8: DelayedScaling(fp8_format=Format.E4M3) or Float8CurrentScaling(fp8_format=Format.E4M3)"),
            std::string::npos)
      << py_e4m3;
  EXPECT_NE(py_e4m3.find("DelayedScaling(fp8_format=Format.E4M3)):\n"), std::string::npos) << py_e4m3;
  EXPECT_EQ(py_e4m3.find("HYBRID"), std::string::npos) << py_e4m3;
}

TEST(WriteTorchExport, WritesTheJsonAndTheFilterBesideIt) {
  EXPECT_EQ(torchFilterPath("out/recipe.json"), "out/recipe.py");
  EXPECT_EQ(torchFilterPath("out/recipe"), "out/recipe.py");
  EXPECT_THROW(torchFilterPath("out/recipe.py"), Error);
  fs::path dir = fs::path(::testing::TempDir()) / ("pgq_recipe_export_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Recipe r = gpt2Recipe();
  std::string json = (dir / "F+B_SR.json").string();
  EXPECT_EQ(writeTorchExport(json, r), (dir / "F+B_SR.py").string());
  auto read = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(read(json), recipeToTorchJson(r));
  EXPECT_EQ(read(dir / "F+B_SR.py"), recipeToTorchFilter(r));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pgq
