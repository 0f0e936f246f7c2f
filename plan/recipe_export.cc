#include "plan/recipe_export.h"

#include <filesystem>
#include <map>
#include <optional>
#include <unordered_set>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/errors.h"
#include "support/file_io.h"
#include "support/json_text.h"
#include "support/quant_scheme.h"

namespace pgq {
namespace {

// Every test of a decision goes through here, so that renaming Decision's values
// changes one line.
bool isQuantized(const RecipeEntry& e) { return lowPrecisionForTrainers(e); }

// What the ONNX importer names a logits GEMM computed outside any module
// (frontend/onnx/importer.cc): a tied `x @ wte.weight.T`, no nn.Linear.
constexpr std::string_view kLogitsLabel = "get_logits";

// The entry's GEMM as generation recorded it; the export needs it.
const EntryGemm& gemmOf(const Recipe& recipe, const RecipeEntry& e) {
  if (e.label.empty())
    throw Error(fmt::format("{}: entry `match: {}`: the PyTorch export needs one `label:` entry per GEMM, as pgq "
                            "recipe writes them",
                            entryLocation(recipe, e.line), e.match.text()));
  if (!e.gemm)
    throw Error(fmt::format("{}: GEMM '{}': the PyTorch export needs a recipe generated from a profile (pgq recipe "
                            "--export-torch), which knows each GEMM's direction and forward GEMM",
                            entryLocation(recipe, e.line), e.label));
  return *e.gemm;
}

// A Linear computes x.W: exactly one operand of its forward GEMM is a weight, and its
// backward GEMMs are then at most one dgrad (dx) and one wgrad (dW).
bool multipliesByOneWeight(const EntryGemm& forward) {
  return (forward.roles[0] == OperandRole::kWeight) != (forward.roles[1] == OperandRole::kWeight);
}

}  // namespace

ModuleGrouping groupByModule(const Recipe& recipe) {
  // Each forward GEMM with the backward GEMMs that differentiate it, in order of first
  // appearance of either.
  struct GemmGroup {
    const RecipeEntry* forward = nullptr;
    std::vector<const RecipeEntry*> backward;
  };
  std::vector<GemmGroup> groups;
  std::unordered_map<std::string_view, size_t> group_of;
  for (const RecipeEntry& e : recipe.entries) {
    const EntryGemm& gemm = gemmOf(recipe, e);
    const bool backward = isBackward(gemm.direction);
    if (backward && gemm.grad_of.empty()) continue;  // its forward GEMM is unknown: no module's
    auto [it, added] = group_of.try_emplace(backward ? std::string_view(gemm.grad_of) : e.label, groups.size());
    if (added) groups.emplace_back();
    GemmGroup& g = groups[it->second];
    if (backward)
      g.backward.push_back(&e);
    else
      g.forward = &e;
  }
  ModuleGrouping out;
  std::unordered_set<const RecipeEntry*> in_modules;
  std::unordered_map<std::string, std::string_view> label_of_path;
  for (const GemmGroup& g : groups) {
    if (!g.forward || g.forward->label == kLogitsLabel || !multipliesByOneWeight(*g.forward->gemm)) continue;
    ModuleGemms m;
    m.forward = g.forward;
    bool linear = true;  // one dgrad and one wgrad at most
    for (const RecipeEntry* entry : g.backward) {
      const RecipeEntry*& slot = entry->gemm->direction == GemmDirection::kBwdDgrad ? m.dgrad : m.wgrad;
      linear = linear && !slot;
      slot = entry;
    }
    if (!linear) continue;
    m.path = torchModulePath(g.forward->label);
    auto [seen, fresh] = label_of_path.try_emplace(m.path, g.forward->label);
    if (!fresh)
      throw Error(fmt::format("{}: GEMMs '{}' and '{}' both belong to module '{}': the PyTorch export needs one "
                              "forward GEMM per module",
                              entryLocation(recipe, 0), seen->second, g.forward->label, m.path));
    in_modules.insert(m.forward);
    for (const RecipeEntry* e : {m.dgrad, m.wgrad})
      if (e) in_modules.insert(e);
    out.modules.push_back(std::move(m));
  }
  for (const RecipeEntry& e : recipe.entries)
    if (!in_modules.count(&e)) out.other_gemms.push_back(&e);
  return out;
}

namespace {

// "lhs x rhs" for a quantized GEMM, "keep" otherwise.
std::string formatsText(const RecipeEntry& e) {
  return isQuantized(e) ? fmt::format("{} x {}", e.lhs_format.toString(), e.rhs_format.toString()) : std::string("keep");
}

std::string formatsJson(const RecipeEntry* e) { return e ? jsonString(formatsText(*e)) : std::string("null"); }

// The format family of a quantized GEMM (support/quant_format.h): "fp8", or
// "int8 x fp8" when its operands differ.
std::string familyText(const RecipeEntry& e) {
  FormatFamily lhs = formatFamily(e.lhs_format), rhs = formatFamily(e.rhs_format);
  return lhs == rhs ? std::string(nameOf(lhs)) : fmt::format("{} x {}", lhs, rhs);
}

// What Transformer Engine and torchao cannot do of this module's part of the recipe:
// split its GEMMs, SmoothQuant; and whether it is a Linear at all, when the recipe
// has none of its backward GEMMs. Empty when there is nothing to say.
std::string moduleNote(const ModuleGemms& m) {
  std::vector<std::string> notes;
  const bool quantized = isQuantized(*m.forward);
  std::vector<std::string_view> split;
  for (auto [name, e] : {std::pair{"dgrad", m.dgrad}, std::pair{"wgrad", m.wgrad}})
    if (e && isQuantized(*e) != quantized) split.push_back(name);
  if (!split.empty()) {
    std::string which = fmt::format("{}", fmt::join(split, " and "));
    notes.push_back(
        quantized ? fmt::format("the recipe quantizes the forward GEMM but keeps {} in high precision; Transformer "
                                "Engine and torchao quantize a Linear's three GEMMs together, so they will quantize {} "
                                "too (keep the module in high precision to avoid that)",
                                which, which)
                  : fmt::format("the recipe quantizes {} but keeps the forward GEMM in high precision; Transformer "
                                "Engine and torchao quantize a Linear's three GEMMs together, so the module is listed "
                                "as kept and {} {} in high precision",
                                which, which, split.size() > 1 ? "stay" : "stays"));
  }
  for (auto [name, e] : {std::pair{"forward", m.forward}, std::pair{"dgrad", m.dgrad}, std::pair{"wgrad", m.wgrad}})
    if (e && isQuantized(*e) && e->smooth > 0)
      notes.push_back(fmt::format("SmoothQuant (alpha {}) on the {} GEMM has no Transformer Engine or torchao "
                                  "counterpart",
                                  e->smooth, name));
  if (!m.dgrad && !m.wgrad)
    notes.push_back("the recipe has no backward GEMM of this module, so pgq cannot tell whether it multiplies by a "
                    "weight as nn.Linear does; it is listed as one");
  return fmt::format("{}", fmt::join(notes, "; "));
}

std::string jsonList(const std::vector<std::string>& items) {
  if (items.empty()) return "[]";
  std::vector<std::string> quoted;
  for (const std::string& item : items) quoted.push_back("    " + jsonString(item));
  return fmt::format("[\n{}\n  ]", fmt::join(quoted, ",\n"));
}

std::string pythonSet(const std::vector<std::string>& items) {
  if (items.empty()) return "set()";  // `{}` is a dict
  std::string out = "{\n";
  for (const std::string& item : items) out += fmt::format("    {},\n", jsonString(item));
  return out + "}";
}

// The quantized and kept module paths, in recipe order.
std::pair<std::vector<std::string>, std::vector<std::string>> splitModules(const ModuleGrouping& x) {
  std::vector<std::string> quantize, keep;
  for (const ModuleGemms& m : x.modules) (isQuantized(*m.forward) ? quantize : keep).push_back(m.path);
  return {quantize, keep};
}

}  // namespace

std::string entryLocation(const Recipe& recipe, int line) {
  if (recipe.source.empty()) return fmt::format("recipe {} (from profile {})", recipe.name, recipe.profile);
  return line > 0 ? fmt::format("{}:{}", recipe.source, line) : recipe.source;
}

bool lowPrecisionForTrainers(const RecipeEntry& e) {
  return e.decision == Decision::kQuantize && formatFamily(e.lhs_format) != FormatFamily::kBf16;
}

std::string torchModulePath(std::string_view label) {
  std::vector<std::string_view> scopes;
  for (size_t start = 0;;) {
    size_t slash = label.find('/', start);
    scopes.push_back(label.substr(start, slash == std::string_view::npos ? slash : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  std::vector<std::string_view> path;
  for (size_t i = 0; i < scopes.size(); ++i) {
    // `mlp` then `mlp.0`: the container's scope, then its entry's, which repeats it.
    bool extended = i + 1 < scopes.size() && scopes[i + 1].size() > scopes[i].size() &&
                    scopes[i + 1].starts_with(scopes[i]) && scopes[i + 1][scopes[i].size()] == '.';
    if (!extended) path.push_back(scopes[i]);
  }
  return fmt::format("{}", fmt::join(path, "."));
}

std::string recipeToTorchJson(const Recipe& recipe) {
  ModuleGrouping x = groupByModule(recipe);
  std::string out = "{\n";
  out += fmt::format("  \"pgq_recipe\": {},\n  \"model\": {},\n  \"hardware\": {},\n  \"policy\": {},\n"
                     "  \"profile\": {},\n",
                     jsonString(recipe.name), jsonString(recipe.model), jsonString(recipe.hardware),
                     jsonString(recipe.policy), jsonString(recipe.profile));
  std::vector<std::string> modules;
  for (const ModuleGemms& m : x.modules) {
    const bool quantized = isQuantized(*m.forward);
    std::string note = moduleNote(m);
    modules.push_back(fmt::format(
        "    {}: {{\n      \"label\": {},\n      \"format\": {},\n      \"forward\": {},\n      \"dgrad\": {},\n"
        "      \"wgrad\": {},\n      \"keep_reason\": {},\n      \"note\": {}\n    }}",
        jsonString(m.path), jsonString(m.forward->label), quantized ? jsonString(familyText(*m.forward)) : "null",
        formatsJson(m.forward), formatsJson(m.dgrad), formatsJson(m.wgrad),
        quantized ? "null" : jsonString(m.forward->reason), note.empty() ? "null" : jsonString(note)));
  }
  out += modules.empty() ? std::string("  \"modules\": {},\n")
                         : fmt::format("  \"modules\": {{\n{}\n  }},\n", fmt::join(modules, ",\n"));
  auto [quantize, keep] = splitModules(x);
  out += fmt::format("  \"keep_high_precision\": {},\n  \"quantize\": {},\n", jsonList(keep), jsonList(quantize));
  std::vector<std::string> others;
  for (const RecipeEntry* e : x.other_gemms) {
    others.push_back(fmt::format(
        "    {{\"label\": {}, \"direction\": {}, \"decision\": {}, \"formats\": {}, \"reason\": {}}}",
        jsonString(e->label), jsonString(nameOf(e->gemm->direction)),
        jsonString(isQuantized(*e) ? nameOf(formatFamily(e->lhs_format)) : std::string_view("keep")),
        isQuantized(*e) ? jsonString(formatsText(*e)) : "null", jsonString(e->reason)));
  }
  out += others.empty() ? std::string("  \"non_module_gemms\": []\n")
                        : fmt::format("  \"non_module_gemms\": [\n{}\n  ]\n", fmt::join(others, ",\n"));
  return out + "}\n";
}

std::string recipeToTorchFilter(const Recipe& recipe) {
  ModuleGrouping x = groupByModule(recipe);
  auto [quantize, keep] = splitModules(x);
  // The families the quantized modules use, by their text (none for a module whose
  // operands differ), for the hint on which library recipe fits.
  std::map<std::string, std::optional<FormatFamily>> families;
  for (const ModuleGemms& m : x.modules)
    if (isQuantized(*m.forward)) {
      const FormatFamily lhs = formatFamily(m.forward->lhs_format), rhs = formatFamily(m.forward->rhs_format);
      families.emplace(familyText(*m.forward), lhs == rhs ? std::optional(lhs) : std::nullopt);
    }
  // TE's FP8 format: HYBRID (E5M2 gradients) unless every quantized gradient is E4M3.
  bool e5m2_gradient = false, fp8_gradient = false;
  for (const RecipeEntry& e : recipe.entries)
    if (e.gemm && isQuantized(e) && formatFamily(e.lhs_format) == FormatFamily::kFp8)
      for (int side = 0; side < 2; ++side)
        if (e.gemm->roles[side] == OperandRole::kGradient) {
          fp8_gradient = true;
          e5m2_gradient |= (side == 0 ? e.lhs_format : e.rhs_format).element == Element::kE5M2;
        }
  const std::string fp8_format = !fp8_gradient || e5m2_gradient ? "HYBRID" : "E4M3";
  const std::string fp8_hint = fmt::format("DelayedScaling(fp8_format=Format.{}) or Float8CurrentScaling(fp8_format="
                                           "Format.{}); torchao's float8 training",
                                           fp8_format, fp8_format);
  std::string hints;
  for (const auto& [text, family] : families) {
    std::string_view hint = family == FormatFamily::kFp8 ? std::string_view(fp8_hint)
                            : family == FormatFamily::kMxfp8 ? "MXFP8BlockScaling"
                            : family == FormatFamily::kNvfp4
                                ? "NVFP4BlockScaling (pgq recipe --export-megatron writes per-tensor factories)"
                                : "no Transformer Engine or torchao float8 recipe; the nearest is FP8";
    hints += fmt::format("#   {}: {}\n", text, hint);
  }
  std::string out = fmt::format(
      "# pgq recipe {} for model {} on hardware {} (policy {}), for PyTorch.\n"
      "# Written by `pgq recipe --export-torch` with the JSON of the same name, which has the\n"
      "# details: each module's GEMM formats, why modules were kept, and the GEMMs that are no\n"
      "# nn.Linear (attention's batched GEMMs), which neither library converts.\n"
      "#\n"
      "# torchao: convert exactly the Linear modules the recipe quantizes:\n"
      "#     from torchao.float8 import convert_to_float8_training\n"
      "#     convert_to_float8_training(model, module_filter_fn=module_filter_fn)\n"
      "#\n"
      "# Transformer Engine: build each Linear named in PGQ_QUANTIZE as te.Linear and every\n"
      "# other Linear as torch.nn.Linear, which fp8_autocast leaves in high precision:\n"
      "#     import transformer_engine.pytorch as te\n"
      "#     from transformer_engine.common.recipe import DelayedScaling, Format\n"
      "#     linear = te.Linear if path in PGQ_QUANTIZE else torch.nn.Linear  # path: the module's fqn\n"
      "#     with te.fp8_autocast(enabled=True, fp8_recipe=DelayedScaling(fp8_format=Format.{})):\n"
      "#         loss = model(inputs)\n"
      "# Both libraries quantize a Linear's forward, dgrad and wgrad GEMMs together; PGQ_FORMATS\n"
      "# shows where the recipe decided them apart.\n"
      "{}"
      "\n"
      "PGQ_QUANTIZE = {}\n"
      "\n"
      "PGQ_KEEP_HIGH_PRECISION = {}\n"
      "\n"
      "# Per module: its forward, dgrad and wgrad GEMMs' formats (\"lhs x rhs\"), \"keep\" for\n"
      "# high precision, None when the recipe has no such GEMM.\n"
      "PGQ_FORMATS = {{\n",
      jsonString(recipe.name), jsonString(recipe.model), jsonString(recipe.hardware), jsonString(recipe.policy),
      fp8_format,
      hints.empty() ? std::string()
                    : "# Format families of the quantized modules, and their Transformer Engine recipe:\n" + hints,
      pythonSet(quantize), pythonSet(keep));
  auto python = [](const RecipeEntry* e) { return e ? jsonString(formatsText(*e)) : std::string("None"); };
  for (const ModuleGemms& m : x.modules)
    out += fmt::format("    {}: {{\"forward\": {}, \"dgrad\": {}, \"wgrad\": {}}},\n", jsonString(m.path),
                       python(m.forward), python(m.dgrad), python(m.wgrad));
  out += "}\n"
         "\n"
         "\n"
         "def module_filter_fn(module, fqn):\n"
         "    \"\"\"torchao's convert_to_float8_training(model, module_filter_fn=...) calls this with each\n"
         "    nn.Linear and its fully qualified name: True for the modules the recipe quantizes.\"\"\"\n"
         "    return fqn in PGQ_QUANTIZE\n";
  return out;
}

std::string torchFilterPath(const std::string& json_path) {
  std::string py = std::filesystem::path(json_path).replace_extension(".py").string();
  if (py == json_path)
    throw Error(fmt::format("{}: the PyTorch export's JSON cannot end in .py: its Python filter is written beside "
                            "it with that extension (give e.g. recipe.json)",
                            json_path));
  return py;
}

std::string writeTorchExport(const std::string& json_path, const Recipe& recipe) {
  // Both texts first: a recipe the export refuses writes neither file.
  std::string py_path = torchFilterPath(json_path);
  checkFileWithSidecar("--export-torch", json_path, py_path);  // both paths decided before either is written
  std::string json = recipeToTorchJson(recipe);
  std::string py = recipeToTorchFilter(recipe);
  writeFilesTogether({{json_path, json}, {py_path, py}});
  return py_path;
}

}  // namespace pgq
