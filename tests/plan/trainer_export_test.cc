// The exports GPU trainers load: Megatron-LM's --te-precision-config-file and Transformer
// Engine CustomRecipe factories, checked against the schemas those projects define.
#include "plan/trainer_export.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "plan/recipe_export.h"
#include "support/errors.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;

constexpr OperandRoles kLinear = {OperandRole::kActivation, OperandRole::kWeight};

RecipeEntry entry(const std::string& label, GemmDirection direction, const std::string& grad_of, const char* lhs,
                  const char* rhs) {
  RecipeEntry e;
  e.label = label;
  e.decision = lhs ? Decision::kQuantize : Decision::kKeep;
  if (lhs) {
    e.lhs_format = QuantFormat::parse(lhs);
    e.rhs_format = QuantFormat::parse(rhs);
  }
  const OperandRoles roles = direction == GemmDirection::kFwd       ? kLinear
                             : direction == GemmDirection::kBwdDgrad ? OperandRoles{OperandRole::kGradient,
                                                                                    OperandRole::kWeight}
                                                                     : OperandRoles{OperandRole::kActivation,
                                                                                    OperandRole::kGradient};
  e.gemm = EntryGemm{direction, roles, grad_of};
  return e;
}

// NVIDIA's recipe on a module's three GEMMs: 1-D activations, 16x16 weights, SR gradients,
// the transform on the weight gradient's operands.
void nvfp4Module(Recipe& r, const std::string& label, bool backward = true) {
  const char *act = "e2m1:block16:rtn:scale=e4m3", *w = "e2m1:block16x16:rtn:scale=e4m3",
             *grad = "e2m1:block16:sr:scale=e4m3", *act_rht = "e2m1:block16:rtn:scale=e4m3:rht",
             *grad_rht = "e2m1:block16:sr:scale=e4m3:rht";
  r.entries.push_back(entry(label, GemmDirection::kFwd, "", act, w));
  r.entries.push_back(entry(label + ":dgrad", GemmDirection::kBwdDgrad, label, backward ? grad : nullptr, w));
  r.entries.push_back(entry(label + ":wgrad", GemmDirection::kBwdWgrad, label, backward ? act_rht : nullptr, grad_rht));
}

Recipe gptRecipe() {
  Recipe r;
  r.name = "nvfp4";
  r.policy = "nvfp4";
  r.model = "tiny";
  r.hardware = "b200";
  for (const char* gemm : {"q", "k", "v", "out"}) nvfp4Module(r, std::string("layer0/attn/") + gemm);
  nvfp4Module(r, "layer0/mlp/up");
  nvfp4Module(r, "layer0/mlp/down", /*backward=*/false);  // forward-only: needs a custom factory
  r.entries.push_back(entry("layer1/mlp/up", GemmDirection::kFwd, "", nullptr, nullptr));
  r.entries.push_back(entry("get_logits", GemmDirection::kFwd, "", nullptr, nullptr));
  return r;
}

// Megatron-LM's schema as read from megatron/core/extensions/transformer_engine.py
// (TEQuantizationParams.parse_from_config, TEQuantizationRecipe's dataclass fields) and
// docs TransformerEngineMixedPrecision.md, Megatron-LM main as of 2026 (the version with
// fp4_quantization_recipe and custom_recipe_factory): configs with exactly
// transformer_engine_config_type (TEQuantizationParams) and training_recipe (plus
// optional evaluation_recipe); a recipe's keys among its fields, fp8 and fp4 exclusive,
// custom needs a factory path "pkg.mod.func", delayed scaling refused; matchers of type
// glob with enabled, pattern and a config that exists.
void checkMegatronSchema(const YAML::Node& root) {
  const std::set<std::string> recipe_fields = {"fp8_quantization_recipe", "fp4_quantization_recipe",
                                               "custom_recipe_factory", "fp8_format", "override_quantized_autocast",
                                               "override_nonquantized_autocast", "tp_only_amax_red"};
  for (const auto& top : root) EXPECT_TRUE(top.first.as<std::string>() == "configs" || top.first.as<std::string>() == "matchers");
  std::set<std::string> configs;
  for (const auto& c : root["configs"]) {
    const std::string name = c.first.as<std::string>();
    configs.insert(name);
    const YAML::Node body = c.second;
    EXPECT_EQ(body["transformer_engine_config_type"].as<std::string>(), "TEQuantizationParams") << name;
    ASSERT_TRUE(body["training_recipe"].IsMap()) << name;
    EXPECT_EQ(body.size(), body["evaluation_recipe"] ? 3u : 2u) << name;
    const YAML::Node recipe = body["training_recipe"];
    for (const auto& field : recipe) EXPECT_TRUE(recipe_fields.count(field.first.as<std::string>())) << name;
    const bool fp8 = bool(recipe["fp8_quantization_recipe"]), fp4 = bool(recipe["fp4_quantization_recipe"]);
    EXPECT_FALSE(fp8 && fp4) << name;
    if (fp8) {
      const std::string v = recipe["fp8_quantization_recipe"].as<std::string>();
      EXPECT_TRUE(v == "tensorwise" || v == "blockwise" || v == "mxfp8" || v == "custom") << v;
    }
    if (fp4) {
      const std::string v = recipe["fp4_quantization_recipe"].as<std::string>();
      EXPECT_TRUE(v == "nvfp4" || v == "custom") << v;
    }
    const bool custom = (fp8 && recipe["fp8_quantization_recipe"].as<std::string>() == "custom") ||
                        (fp4 && recipe["fp4_quantization_recipe"].as<std::string>() == "custom");
    if (custom) {
      EXPECT_NE(recipe["custom_recipe_factory"].as<std::string>().find('.'), std::string::npos) << name;
    }
    if (recipe["fp8_format"]) {
      const std::string v = recipe["fp8_format"].as<std::string>();
      EXPECT_TRUE(v == "e4m3" || v == "hybrid") << v;
    }
  }
  for (const auto& m : root["matchers"]) {
    const YAML::Node body = m.second;
    EXPECT_EQ(body["type"].as<std::string>(), "glob");
    EXPECT_TRUE(body["enabled"].as<bool>());
    EXPECT_TRUE(configs.count(body["config"].as<std::string>())) << body["config"].as<std::string>();
    EXPECT_FALSE(body["pattern"].as<std::string>().empty());
  }
}

TEST(MegatronExport, NamesMegatronsModules) {
  EXPECT_EQ(megatronModuleName("layer3.attn.q"), "decoder.layers.3.self_attention.linear_qkv");
  EXPECT_EQ(megatronModuleName("layer3.attn.out"), "decoder.layers.3.self_attention.linear_proj");
  EXPECT_EQ(megatronModuleName("layer12.mlp.gate"), "decoder.layers.12.mlp.linear_fc1");
  EXPECT_EQ(megatronModuleName("layer0.mlp.down"), "decoder.layers.0.mlp.linear_fc2");
  EXPECT_EQ(megatronModuleName("blocks.0.attn.qkv"), "");
  EXPECT_EQ(megatronModuleName("layerx.mlp.up"), "");
}

TEST(MegatronExport, ConfigFollowsMegatronsSchema) {
  const std::string text = recipeToMegatronConfig(gptRecipe(), "te_precision");
  const YAML::Node root = YAML::Load(text);
  checkMegatronSchema(root);
  std::map<std::string, std::string> config_of;  // module -> its config's training_recipe
  for (const auto& m : root["matchers"])
    config_of[m.second["pattern"].as<std::string>()] = m.second["config"].as<std::string>();
  // q, k and v are one Megatron module, in the stock NVFP4 recipe.
  ASSERT_EQ(config_of.size(), 5u) << text;
  auto recipe = [&](const std::string& module) { return root["configs"][config_of.at(module)]["training_recipe"]; };
  EXPECT_EQ(recipe("decoder.layers.0.self_attention.linear_qkv")["fp4_quantization_recipe"].as<std::string>(), "nvfp4");
  EXPECT_EQ(recipe("decoder.layers.0.mlp.linear_fc1")["fp4_quantization_recipe"].as<std::string>(), "nvfp4");
  // Forward-only: a custom recipe whose factory lives in te_precision.py.
  const YAML::Node down = recipe("decoder.layers.0.mlp.linear_fc2");
  EXPECT_EQ(down["fp4_quantization_recipe"].as<std::string>(), "custom");
  EXPECT_EQ(down["custom_recipe_factory"].as<std::string>().rfind("te_precision.pgq_factory_", 0), 0u);
  EXPECT_EQ(config_of.at("decoder.layers.1.mlp.linear_fc1"), "bf16");
  EXPECT_NE(text.find("layer0/mlp/down: the recipe keeps both backward GEMMs"), std::string::npos) << text;
}

// q, k and v are one Megatron module (linear_qkv): when pgq keeps q but quantizes k and v,
// the module is kept, said once, whichever of them comes first.
TEST(MegatronExport, AModuleWhoseGemmsWereDecidedApartIsKeptAndSaidOnce) {
  for (const bool kept_first : {true, false}) {
    Recipe r;
    r.name = r.policy = "nvfp4";
    r.model = "tiny";
    r.hardware = "b200";
    const std::vector<std::string> order = kept_first ? std::vector<std::string>{"q", "k", "v"}
                                                      : std::vector<std::string>{"k", "q", "v"};
    for (const std::string& g : order) {
      const std::string label = "layer0/attn/" + g;
      if (g == "q") {
        for (auto [suffix, dir] : {std::pair{"", GemmDirection::kFwd}, {":dgrad", GemmDirection::kBwdDgrad},
                                   {":wgrad", GemmDirection::kBwdWgrad}})
          r.entries.push_back(entry(label + suffix, dir, dir == GemmDirection::kFwd ? "" : label, nullptr, nullptr));
      } else {
        nvfp4Module(r, label);
      }
    }
    const std::string text = recipeToMegatronConfig(r, "te_precision");
    const YAML::Node root = YAML::Load(text);
    checkMegatronSchema(root);
    for (const auto& m : root["matchers"]) {
      if (m.second["pattern"].as<std::string>() == "decoder.layers.0.self_attention.linear_qkv") {
        EXPECT_EQ(m.second["config"].as<std::string>(), "bf16") << text;
      }
    }
    const std::string apart = "share Megatron module decoder.layers.0.self_attention.linear_qkv but were decided apart";
    const size_t at = text.find(apart);
    ASSERT_NE(at, std::string::npos) << text;
    EXPECT_EQ(text.find(apart, at + 1), std::string::npos) << "said twice:\n" << text;
    EXPECT_NE(text.find(kept_first ? "layer0/attn/q and layer0/attn/k share" : "layer0/attn/k and layer0/attn/q share"),
              std::string::npos)
        << text;
  }
}

TEST(MegatronExport, RefusesModelsWithoutMegatronsModulesAndFormatsTeLacks) {
  Recipe imported = gptRecipe();
  imported.source = "r.yaml";
  imported.entries.front().label = "blocks.0/attn/qkv";
  imported.entries[1].gemm->grad_of = imported.entries[2].gemm->grad_of = "blocks.0/attn/qkv";
  try {
    recipeToMegatronConfig(imported, "m");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("r.yaml: GEMM 'blocks.0/attn/qkv'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Megatron-LM's GPT has no such module"), std::string::npos) << e.what();
  }
  Recipe int8 = gptRecipe();
  int8.entries.front().lhs_format = QuantFormat::parse("int8:channel:rtn");
  EXPECT_THROW(recipeToMegatronConfig(int8, "m"), Error);
}

// TE quantizes each tensor of a module once: a recipe that reads one in two formats
// (NVFP4 in the forward GEMM, MXFP8 where a backward threshold fell back) keeps the
// module in bf16 and says why, rather than exporting the format pgq rejected there.
TEST(MegatronExport, ATensorReadInTwoFormatsKeepsItsModule) {
  Recipe r = gptRecipe();
  for (RecipeEntry& e : r.entries)
    if (e.label == "layer0/mlp/up:wgrad") {
      e.lhs_format = QuantFormat::parse("e4m3:block32:rtn:scale=e8m0");
      e.rhs_format = QuantFormat::parse("e4m3:block32:rtn:scale=e8m0");
    }
  const std::string text = recipeToMegatronConfig(r, "te_precision");
  checkMegatronSchema(YAML::Load(text));
  EXPECT_NE(text.find("layer0/mlp/up: the recipe reads input as nvfp4 e2m1 in layer0/mlp/up but as mxfp8 e4m3 in "
                      "layer0/mlp/up:wgrad; Transformer Engine quantizes a tensor once per module: kept in bf16"),
            std::string::npos)
      << text;
  for (const auto& m : YAML::Load(text)["matchers"])
    if (m.second["pattern"].as<std::string>() == "decoder.layers.0.mlp.linear_fc1") {
      EXPECT_EQ(m.second["config"].as<std::string>(), "bf16") << text;
    }
  EXPECT_NE(recipeToTeFactories(r).find("\"decoder.layers.0.mlp.linear_fc1\": {  # layer0/mlp/up\n        \"input\": None,"),
            std::string::npos);
}

// TE transforms only the weight gradient's operands: a transform on a forward or dgrad
// GEMM has no equivalent (it was dropped, or put on the weight's dgrad copy alone).
TEST(MegatronExport, RefusesATransformOutsideTheWeightGradient) {
  for (const char* gemm : {"layer0/mlp/up", "layer0/mlp/up:dgrad"}) {
    Recipe r = gptRecipe();
    r.profile = "p.yaml";
    for (RecipeEntry& e : r.entries)
      if (e.label == gemm) {
        e.lhs_format.hadamard = e.rhs_format.hadamard = true;
      }
    try {
      recipeToMegatronConfig(r, "te_precision");
      ADD_FAILURE() << gemm << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("recipe nvfp4 (from profile p.yaml): GEMM '{}': the random "
                                                       "Hadamard transform on a ",
                                                       gemm)),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("`hadamard: bwd_wgrad`"), std::string::npos) << e.what();
    }
  }
}

// Delayed scaling has no per-module config in Megatron: it exports as current scaling,
// with a note.
TEST(MegatronExport, DelayedScalingIsSaidToExportAsCurrentScaling) {
  Recipe r;
  r.name = r.policy = "fp8-delayed";
  r.model = "tiny";
  r.hardware = "h100-sxm";
  for (auto [suffix, dir, lhs, rhs] :
       {std::tuple{"", GemmDirection::kFwd, "e4m3:tensor:rtn", "e4m3:tensor:rtn"},
        std::tuple{":dgrad", GemmDirection::kBwdDgrad, "e5m2:tensor:rtn", "e4m3:tensor:rtn"},
        std::tuple{":wgrad", GemmDirection::kBwdWgrad, "e4m3:tensor:rtn", "e5m2:tensor:rtn"}}) {
    r.entries.push_back(entry(std::string("layer0/mlp/up") + suffix, dir, *suffix ? "layer0/mlp/up" : "", lhs, rhs));
    r.entries.back().amax_history = 16;
  }
  const std::string text = recipeToMegatronConfig(r, "te_precision");
  EXPECT_NE(text.find("#   3 GEMMs with delayed scaling and 0 with predicted weight scales export as current scaling"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("fp8_quantization_recipe: \"tensorwise\""), std::string::npos) << text;
}

// The factories compile, and with Transformer Engine's classes stubbed (the names and
// keyword arguments of TE's custom_recipes/quantization_recipes_base.py) they hand each
// module and tensor role the quantizer pgq chose, None where it kept the tensor.
TEST(TeFactoryExport, CompilesAndMapsModuleAndRoleToFormat) {
  // scripts/setup.sh installs python3: without it this check would not run at all.
  ASSERT_TRUE(fs::exists("/usr/bin/python3")) << "no /usr/bin/python3 (scripts/setup.sh installs it)";
  const fs::path dir = fs::temp_directory_path() / ("pgq_te_export_" + std::to_string(getpid()));
  fs::create_directories(dir / "transformer_engine" / "pytorch" / "tensor");
  fs::create_directories(dir / "transformer_engine" / "common");
  auto write = [&](const fs::path& p, const std::string& text) { std::ofstream(dir / p) << text; };
  write("transformer_engine_torch.py", "class DType:\n    kFloat4E2M1 = 'e2m1'\n    kFloat8E4M3 = 'e4m3'\n"
                                        "    kFloat8E5M2 = 'e5m2'\n");
  for (const char* p : {"transformer_engine/__init__.py", "transformer_engine/pytorch/__init__.py",
                        "transformer_engine/pytorch/tensor/__init__.py", "transformer_engine/common/__init__.py"})
    write(p, "");
  write("transformer_engine/pytorch/tensor/nvfp4_tensor.py",
        "class NVFP4Quantizer:\n    def __init__(self, fp4_dtype, rowwise=True, columnwise=True, with_rht=False,\n"
        "                 with_post_rht_amax=False, with_2d_quantization=False, stochastic_rounding=False,\n"
        "                 with_random_sign_mask=True):\n        self.kw = dict(dtype=fp4_dtype, rht=with_rht, "
        "two_d=with_2d_quantization, sr=stochastic_rounding)\n");
  write("transformer_engine/common/recipe.py", "class CustomRecipe:\n    def __init__(self, qfactory):\n"
                                               "        self.qfactory = qfactory\n");
  Recipe recipe = gptRecipe();
  recipe.name = "fp8 \"\"\" \\N x";  // would end the docstring, or be a bad escape in it
  write("te_precision.py", recipeToTeFactories(recipe));
  write("check.py", R"PY(
import te_precision as t
from types import SimpleNamespace as Role
qkv = "decoder.layers.0.self_attention.linear_qkv"
f = t.pgq_custom_recipe(qkv).qfactory
assert f(Role(module_type="linear", tensor_type="weight", name="qkv")).kw == dict(dtype="e2m1", rht=False, two_d=True, sr=False)
assert f(Role(module_type="linear", tensor_type="input", name="qkv")).kw == dict(dtype="e2m1", rht=True, two_d=False, sr=False)
assert f("linear:grad_output").kw == dict(dtype="e2m1", rht=True, two_d=False, sr=True)
# TE 2.9's string roles (session 15: they were all taken as high precision).
assert f("linear_input").kw == dict(dtype="e2m1", rht=True, two_d=False, sr=False)
assert f("linear_weight").kw["two_d"] is True
assert f("linear_grad_output").kw["sr"] is True
assert f("linear_output") is None and f("linear_grad_input") is None
try:
    f("attention_q")
    raise SystemExit("an unknown role was accepted")
except ValueError as e:
    assert "attention_q" in str(e)
assert t.PGQ_RECIPE["name"] == 'fp8 """ \\N x'
down = t._factory_for("decoder.layers.0.mlp.linear_fc2")
assert down(Role(tensor_type="grad_output")) is None
assert down(Role(tensor_type="input")).kw["rht"] is False
assert t.pgq_quantizer_factory(Role(tensor_type="input", name="decoder.layers.1.mlp.linear_fc1")) is None
assert t.pgq_quantizer_factory(Role(tensor_type="weight", name=qkv)).kw["two_d"] is True
print("ok")
)PY");
  const std::string cmd = "cd " + dir.string() + " && /usr/bin/python3 -m py_compile te_precision.py && " +
                          "/usr/bin/python3 check.py > out.txt 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream out(dir / "out.txt");
  const std::string output((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << output << "\n" << recipeToTeFactories(recipe);
  fs::remove_all(dir);
}

TEST(MegatronExport, WritesBothFilesAndRefusesANameThatIsNoModule) {
  const fs::path dir = fs::temp_directory_path() / ("pgq_megatron_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string py = writeMegatronExport((dir / "te_precision.yaml").string(), gptRecipe());
  EXPECT_EQ(py, (dir / "te_precision.py").string());
  EXPECT_TRUE(fs::exists(dir / "te_precision.yaml"));
  EXPECT_THROW(writeMegatronExport((dir / "te-precision.yaml").string(), gptRecipe()), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pgq
