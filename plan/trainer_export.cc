#include "plan/trainer_export.h"

#include <cctype>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plan/recipe_export.h"
#include "support/errors.h"
#include "support/file_io.h"
#include "support/json_text.h"
#include "support/quant_scheme.h"

namespace pgq {
namespace {

// What Transformer Engine quantizes one tensor role to.
struct TensorSpec {
  FormatFamily family = FormatFamily::kNvfp4;  // nvfp4, mxfp8 or fp8
  Element element = Element::kE2M1;
  bool rht = false, two_d = false, sr = false;
  bool operator==(const TensorSpec&) const = default;
};

// A Megatron module's three tensor roles (nullopt: high precision) and what the export
// could not say of pgq's decisions there.
struct ModuleSpecs {
  std::string name;
  std::optional<TensorSpec> input, weight, grad_output;
  std::vector<std::string> labels;  // pgq's forward GEMMs in it
  std::vector<std::string> notes;
  bool split = false;  // pgq modules of it were decided apart
  bool quantized() const { return input || weight || grad_output; }
  bool sameRoles(const ModuleSpecs& o) const {
    return input == o.input && weight == o.weight && grad_output == o.grad_output;
  }
};

TensorSpec specOf(const Recipe& recipe, const RecipeEntry& e, const QuantFormat& f, std::string_view field) {
  const FormatFamily family = formatFamily(f);
  if (family != FormatFamily::kNvfp4 && family != FormatFamily::kMxfp8 && family != FormatFamily::kFp8)
    throw Error(fmt::format("{}: GEMM '{}' field '{}': format {} (family {}) has no Transformer Engine quantizer "
                            "(TE quantizes to fp8, mxfp8 and nvfp4): keep the GEMM or choose another scheme",
                            entryLocation(recipe, e.line), e.label, field, f.toString(), family));
  // TE's FP8 quantizers have no stochastic rounding: an FP8 gradient in SR exports as
  // round to nearest (NVFP4's quantizer has it).
  return {family, f.element, f.hadamard, f.block2d, family == FormatFamily::kNvfp4 && f.rounding == Rounding::kStochastic};
}

// The format of the operand of `e` with (gradient) or without a gradient role.
const QuantFormat& sideFormat(const RecipeEntry& e, bool weight, bool gradient) {
  const OperandRoles& roles = e.gemm->roles;
  auto is = [&](OperandRole r) {
    return gradient ? r == OperandRole::kGradient : weight ? r == OperandRole::kWeight : r == OperandRole::kActivation;
  };
  return is(roles[0]) ? e.lhs_format : e.rhs_format;
}

bool quantized(const RecipeEntry* e) { return e && lowPrecisionForTrainers(*e); }

// One tensor as a GEMM reads it, for comparing its uses: TE quantizes each tensor of a
// module once (input: fprop and wgrad; weight: fprop and dgrad; grad_output: dgrad and
// wgrad), so the GEMMs that read it must agree on its format. The transform is compared
// apart: TE applies it to the weight gradient's copies only.
struct TensorUse {
  const RecipeEntry* gemm;
  TensorSpec spec;
};

TensorUse useOf(const Recipe& recipe, const RecipeEntry& e, bool weight, bool gradient, std::string_view field) {
  TensorSpec spec = specOf(recipe, e, sideFormat(e, weight, gradient), field);
  spec.rht = false;
  return {&e, spec};
}

std::string specText(const TensorSpec& t) {
  return fmt::format("{} {}{}{}", t.family, elementName(t.element), t.two_d ? " 2-D" : "", t.sr ? " sr" : "");
}

ModuleSpecs specsOf(const Recipe& recipe, const ModuleGemms& m) {
  ModuleSpecs s;
  s.labels = {m.forward->label};
  const bool fwd = quantized(m.forward), dgrad = quantized(m.dgrad), wgrad = quantized(m.wgrad);
  if (!fwd) {
    if (dgrad || wgrad)
      s.notes.push_back(fmt::format("{}: backward GEMMs quantized under a high-precision forward GEMM; Transformer "
                                    "Engine cannot run them so: kept in bf16",
                                    m.forward->label));
    return s;
  }
  // TE transforms (random Hadamard) the weight gradient's operands only, as
  // NVFP4BlockScaling does; a transform elsewhere has no TE equivalent.
  for (const RecipeEntry* e : {m.forward, dgrad ? m.dgrad : nullptr})
    if (e && (e->lhs_format.hadamard || e->rhs_format.hadamard))
      throw Error(fmt::format("{}: GEMM '{}': the random Hadamard transform on a {} GEMM; Transformer Engine "
                              "applies it only to weight-gradient GEMMs (NVFP4BlockScaling's wgrad): make the recipe "
                              "with a policy's `hadamard: bwd_wgrad`",
                              entryLocation(recipe, e->line), e->label, nameOf(e->gemm->direction)));
  const RecipeEntry& f = *m.forward;
  // Each tensor's uses: the first is what the export writes, the others must agree.
  std::vector<std::pair<const char*, std::vector<TensorUse>>> tensors = {
      {"input", {useOf(recipe, f, false, false, "lhs_format/rhs_format (input)")}},
      {"weight", {useOf(recipe, f, true, false, "lhs_format/rhs_format (weight)")}},
      {"grad_output", {}}};
  if (wgrad) tensors[0].second.push_back(useOf(recipe, *m.wgrad, false, false, "lhs_format/rhs_format (input)"));
  if (dgrad) tensors[1].second.push_back(useOf(recipe, *m.dgrad, true, false, "lhs_format/rhs_format (weight)"));
  for (const RecipeEntry* e : {dgrad ? m.dgrad : nullptr, wgrad ? m.wgrad : nullptr})
    if (e) tensors[2].second.push_back(useOf(recipe, *e, false, true, "lhs_format/rhs_format (grad_output)"));
  for (const auto& [tensor, uses] : tensors)
    for (const TensorUse& use : uses)
      if (!(use.spec == uses.front().spec)) {
        s.notes.push_back(fmt::format("{}: the recipe reads {} as {} in {} but as {} in {}; Transformer Engine "
                                      "quantizes a tensor once per module: kept in bf16",
                                      m.forward->label, tensor, specText(uses.front().spec), uses.front().gemm->label,
                                      specText(use.spec), use.gemm->label));
        return s;
      }
  s.input = tensors[0].second.front().spec;
  s.weight = tensors[1].second.front().spec;
  if (wgrad) s.input->rht = sideFormat(*m.wgrad, false, false).hadamard;
  if (!tensors[2].second.empty()) {
    s.grad_output = tensors[2].second.front().spec;
    s.grad_output->rht = wgrad && sideFormat(*m.wgrad, false, true).hadamard;
  }
  if (dgrad != wgrad || (!dgrad && (m.dgrad || m.wgrad)))
    s.notes.push_back(fmt::format("{}: the recipe keeps {} in high precision; grad_output is one tensor role for "
                                  "both backward GEMMs{}",
                                  m.forward->label, !dgrad && !wgrad ? "both backward GEMMs" : !dgrad ? "dgrad" : "wgrad",
                                  !dgrad && !wgrad ? " (TE's backward_override=high_precision says it for a whole "
                                                     "recipe)"
                                                   : ", so both run quantized"));
  return s;
}

// The Megatron modules of the recipe, in order, each merging pgq's modules of its name.
std::vector<ModuleSpecs> megatronModules(const Recipe& recipe) {
  const ModuleGrouping grouping = groupByModule(recipe);
  std::vector<ModuleSpecs> out;
  std::map<std::string, size_t> index;
  for (const ModuleGemms& m : grouping.modules) {
    const std::string name = megatronModuleName(m.path);
    if (name.empty())
      throw Error(fmt::format("{}: GEMM '{}' (module {}): Megatron-LM's GPT has no such module (it names "
                              "decoder.layers.N.self_attention.linear_qkv / linear_proj and mlp.linear_fc1 / "
                              "linear_fc2); --export-megatron needs a recipe for a model pgq built (a preset or a "
                              "model YAML), not an imported one",
                              entryLocation(recipe, m.forward->line), m.forward->label, m.path));
    ModuleSpecs s = specsOf(recipe, m);
    s.name = name;
    auto [it, fresh] = index.try_emplace(name, out.size());
    if (fresh) {
      out.push_back(std::move(s));
      continue;
    }
    ModuleSpecs& merged = out[it->second];
    merged.notes.insert(merged.notes.end(), s.notes.begin(), s.notes.end());
    // Once kept for a disagreement, the module stays kept (its roles are all empty).
    if (!merged.sameRoles(s) && (merged.quantized() || s.quantized()) && !merged.split) {
      merged.notes.push_back(fmt::format("{} and {} share Megatron module {} but were decided apart: kept in bf16",
                                         fmt::join(merged.labels, ", "), m.forward->label, name));
      merged.input = merged.weight = merged.grad_output = std::nullopt;
      merged.split = true;
    }
    merged.labels.push_back(m.forward->label);
  }
  return out;
}

// The stock Transformer Engine recipe the roles amount to: the config's name and its
// training_recipe lines as Megatron names them, or nothing when only a custom factory
// says them.
struct Stock {
  std::string name;
  std::vector<std::string> lines;
};
std::optional<Stock> stockRecipe(const ModuleSpecs& s) {
  if (!s.input || !s.weight || !s.grad_output) return std::nullopt;
  // NVFP4BlockScaling's defaults: 2-D weights, the transform on the weight gradient's
  // inputs, stochastic rounding on gradients.
  const TensorSpec nv_input{FormatFamily::kNvfp4, Element::kE2M1, true, false, false},
      nv_weight{FormatFamily::kNvfp4, Element::kE2M1, false, true, false},
      nv_grad{FormatFamily::kNvfp4, Element::kE2M1, true, false, true};
  if (*s.input == nv_input && *s.weight == nv_weight && *s.grad_output == nv_grad)
    return Stock{"nvfp4", {"fp4_quantization_recipe: \"nvfp4\""}};
  const TensorSpec mx{FormatFamily::kMxfp8, Element::kE4M3, false, false, false};
  if (*s.input == mx && *s.weight == mx && *s.grad_output == mx)
    return Stock{"mxfp8", {"fp8_quantization_recipe: \"mxfp8\""}};
  const TensorSpec e4m3{FormatFamily::kFp8, Element::kE4M3, false, false, false},
      e5m2{FormatFamily::kFp8, Element::kE5M2, false, false, false};
  if (*s.input == e4m3 && *s.weight == e4m3 && (*s.grad_output == e4m3 || *s.grad_output == e5m2)) {
    const char* format = *s.grad_output == e5m2 ? "hybrid" : "e4m3";
    return Stock{fmt::format("fp8_{}", format),
                 {"fp8_quantization_recipe: \"tensorwise\"", fmt::format("fp8_format: \"{}\"", format)}};
  }
  return std::nullopt;
}

bool fourBit(const ModuleSpecs& s) {
  for (const auto* t : {&s.input, &s.weight, &s.grad_output})
    if (*t && (*t)->family == FormatFamily::kNvfp4) return true;
  return false;
}

std::string pythonSpec(const std::optional<TensorSpec>& t) {
  if (!t) return "None";
  return fmt::format("{{\"family\": \"{}\", \"element\": \"{}\", \"rht\": {}, \"two_d\": {}, \"sr\": {}}}", t->family,
                     elementName(t->element), t->rht ? "True" : "False", t->two_d ? "True" : "False",
                     t->sr ? "True" : "False");
}

bool isPythonIdentifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

}  // namespace

std::string megatronModuleName(std::string_view path) {
  // layer<N>.<attn|mlp>.<gemm>, as frontend/transformer.cc labels layer<N>/attn/q.
  static const std::map<std::string_view, std::string_view> kModules = {
      {"attn.q", "self_attention.linear_qkv"}, {"attn.k", "self_attention.linear_qkv"},
      {"attn.v", "self_attention.linear_qkv"}, {"attn.out", "self_attention.linear_proj"},
      {"mlp.up", "mlp.linear_fc1"},            {"mlp.gate", "mlp.linear_fc1"},
      {"mlp.down", "mlp.linear_fc2"}};
  if (!path.starts_with("layer")) return "";
  const size_t dot = path.find('.');
  const std::string_view layer = path.substr(5, dot == std::string_view::npos ? dot : dot - 5);
  if (dot == std::string_view::npos || layer.empty() || !std::all_of(layer.begin(), layer.end(), ::isdigit)) return "";
  auto it = kModules.find(path.substr(dot + 1));
  return it == kModules.end() ? "" : fmt::format("decoder.layers.{}.{}", layer, it->second);
}

std::string recipeToMegatronConfig(const Recipe& recipe, std::string_view factory_module) {
  const std::vector<ModuleSpecs> modules = megatronModules(recipe);
  std::string configs = "configs:\n  bf16:\n    transformer_engine_config_type: \"TEQuantizationParams\"\n"
                        "    training_recipe: {}\n";
  std::set<std::string> written;  // config names
  std::string matchers = "matchers:\n", notes;
  // Scaling the per-module configs cannot say (Megatron: "Delayed scaling not in scope
  // of te per-module quantization config").
  int delayed = 0, predicted = 0;
  for (const RecipeEntry& e : recipe.entries)
    if (lowPrecisionForTrainers(e)) delayed += e.amax_history > 0, predicted += e.predict_weight_scale;
  if (delayed || predicted)
    notes += fmt::format("#   {} GEMMs with delayed scaling and {} with predicted weight scales export as current "
                         "scaling (each tensor's scale from its own amax at each step): Megatron's per-module "
                         "configs have no delayed scaling\n",
                         delayed, predicted);
  for (size_t i = 0; i < modules.size(); ++i) {
    const ModuleSpecs& s = modules[i];
    for (const std::string& n : s.notes) notes += fmt::format("#   {}\n", n);
    std::string config = "bf16";
    if (s.quantized()) {
      std::optional<Stock> stock = stockRecipe(s);
      if (!stock)
        stock = Stock{fmt::format("pgq_{}", i),
                      {fmt::format("{}_quantization_recipe: \"custom\"", fourBit(s) ? "fp4" : "fp8"),
                       fmt::format("custom_recipe_factory: \"{}.pgq_factory_{}\"", factory_module, i)}};
      // The recipe decides every module: apply even where the run's default is bf16.
      // (Copied from a string, not built from the literal in place: GCC 12 at -O3 warns,
      // wrongly, that the literal's inlined copy overruns the new element.)
      static const std::string kOverride = "override_nonquantized_autocast: true";
      stock->lines.push_back(kOverride);
      config = stock->name;
      if (written.insert(config).second)
        configs += fmt::format("  {}:\n    transformer_engine_config_type: \"TEQuantizationParams\"\n"
                               "    training_recipe:\n      {}\n",
                               config, fmt::join(stock->lines, "\n      "));
    }
    matchers += fmt::format("  m{}:\n    type: \"glob\"\n    enabled: true\n    pattern: \"{}\"\n    config: \"{}\"\n", i,
                            s.name, config);
  }
  return fmt::format(
      "# Megatron-LM --te-precision-config-file: pgq recipe {} for model {} on {} (policy {}).\n"
      "# One matcher per module, in order; custom configs name the factories in {}.py (put it\n"
      "# on PYTHONPATH). Module names assume one pipeline stage (decoder.layers.N, N from 0).\n"
      "{}{}{}",
      jsonString(recipe.name), jsonString(recipe.model), jsonString(recipe.hardware), jsonString(recipe.policy),
      factory_module, notes.empty() ? std::string() : "# What the file cannot say of the recipe:\n" + notes, configs,
      matchers);
}

std::string recipeToTeFactories(const Recipe& recipe) {
  const std::vector<ModuleSpecs> modules = megatronModules(recipe);
  std::string table, factories;
  for (size_t i = 0; i < modules.size(); ++i) {
    const ModuleSpecs& s = modules[i];
    table += fmt::format("    {}: {{  # {}\n        \"input\": {},\n        \"weight\": {},\n        \"grad_output\": {},\n"
                         "    }},\n",
                         jsonString(s.name), fmt::join(s.labels, ", "), pythonSpec(s.input), pythonSpec(s.weight),
                         pythonSpec(s.grad_output));
    factories += fmt::format("pgq_factory_{} = _factory_for({})\n", i, jsonString(s.name));
  }
  return fmt::format(R"PY("""Transformer Engine quantizer factories for a pgq recipe (PGQ_RECIPE below).

Written by `pgq recipe --export-megatron`. TE's CustomRecipe(qfactory=f) calls f(role) for each
tensor a module quantizes: role.tensor_type is "input", "weight" or "grad_output" (TE's
QuantizerRole), or role is a string, "linear_input", "linear_weight", "linear_grad_output"
(TE 2.9's first CustomRecipe API). f returns a quantizer, or None to keep that tensor in
high precision (pgq never quantizes a module's output or grad_input). PGQ_TENSOR_FORMATS maps each Megatron module and
tensor role to the format pgq chose for that operand: input and weight are the forward
GEMM's operands, grad_output the backward GEMMs' gradient; rht (random Hadamard transform)
and sr (stochastic rounding) are per tensor, as TE's NVFP4Quantizer takes them.
Quantizer arguments follow TE's transformer_engine/pytorch/custom_recipes/
quantization_recipes_base.py (nvfp4_quantizer_factory, mxfp8_quantizer_factory,
current_scaling_quantizer_factory).
"""

PGQ_RECIPE = {{"name": {}, "model": {}, "hardware": {}, "policy": {}}}

PGQ_TENSOR_FORMATS = {{
{}}}


def _tensor_type(role):
    name = role if isinstance(role, str) else getattr(role, "tensor_type", None)
    if isinstance(name, str):
        name = name.rsplit(":", 1)[-1]
        if name.startswith("linear_"):
            name = name[len("linear_"):]
        if name in ("input", "weight", "grad_output", "output", "grad_input"):
            return name
    raise ValueError("pgq quantizer factory: a tensor role it does not know: %r" % (role,))


def _quantizer(spec):
    import transformer_engine_torch as tex

    if spec["family"] == "nvfp4":
        from transformer_engine.pytorch.tensor.nvfp4_tensor import NVFP4Quantizer

        return NVFP4Quantizer(
            fp4_dtype=tex.DType.kFloat4E2M1,
            rowwise=True,
            columnwise=True,
            with_rht=spec["rht"],
            with_post_rht_amax=spec["rht"],
            with_2d_quantization=spec["two_d"],
            stochastic_rounding=spec["sr"],
            with_random_sign_mask=True,
        )
    dtype = tex.DType.kFloat8E4M3 if spec["element"] == "e4m3" else tex.DType.kFloat8E5M2
    if spec["family"] == "mxfp8":
        from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer

        return MXFP8Quantizer(fp8_dtype=dtype)
    import torch
    from transformer_engine.pytorch.tensor.float8_tensor import Float8CurrentScalingQuantizer

    return Float8CurrentScalingQuantizer(fp8_dtype=dtype, device=torch.device("cuda"))


def _factory_for(module):
    formats = PGQ_TENSOR_FORMATS[module]

    def factory(role):
        spec = formats.get(_tensor_type(role))
        return None if spec is None else _quantizer(spec)

    factory.__name__ = "pgq_factory"
    factory.__doc__ = "The quantizers of " + module + "."
    return factory


# One factory per module, as Megatron's custom_recipe_factory names them.
{}

def pgq_quantizer_factory(role):
    """A factory for modules named after Megatron's (te.Linear(name=...)): by role.name."""
    name = getattr(role, "name", "")
    if name not in PGQ_TENSOR_FORMATS:
        return None
    return _factory_for(name)(role)


def pgq_custom_recipe(module):
    """CustomRecipe for one module, for use with TE's autocast around it."""
    from transformer_engine.common.recipe import CustomRecipe

    return CustomRecipe(qfactory=_factory_for(module))
)PY",
                     jsonString(recipe.name), jsonString(recipe.model), jsonString(recipe.hardware),
                     jsonString(recipe.policy), table, factories);
}

std::string megatronFactoryPath(const std::string& yaml_path) {
  const std::filesystem::path path(yaml_path);
  const std::string stem = path.stem().string();
  if (!isPythonIdentifier(stem))
    throw Error(fmt::format("--export-megatron {}: the factories are written beside it as {}.py and imported as "
                            "module '{}', which is no Python identifier: give a name such as te_precision.yaml",
                            yaml_path, stem, stem));
  const std::string py_path = std::filesystem::path(path).replace_extension(".py").string();
  if (py_path == yaml_path)
    throw Error(fmt::format("--export-megatron {}: give a .yaml file (its factories go to {})", yaml_path, py_path));
  checkFileWithSidecar("--export-megatron", yaml_path, py_path);
  return py_path;
}

std::string writeMegatronExport(const std::string& yaml_path, const Recipe& recipe) {
  const std::string py_path = megatronFactoryPath(yaml_path);
  const std::string stem = std::filesystem::path(yaml_path).stem().string();
  // Both texts first: a recipe the export refuses writes neither file.
  const std::string yaml = recipeToMegatronConfig(recipe, stem), py = recipeToTeFactories(recipe);
  writeFilesTogether({{yaml_path, yaml}, {py_path, py}});
  return py_path;
}

}  // namespace pgq
