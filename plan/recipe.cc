#include "plan/recipe.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "ir/analysis.h"
#include "support/config_file.h"
#include "support/errors.h"

namespace pgq {

double RecipeSummary::estimatedStepSpeedup() const {
  if (est_gemm_quantized_ms <= 0) return 1.0;
  if (measured_step_ms <= 0) return est_gemm_ms / est_gemm_quantized_ms;
  // The non-GEMM part of the step does not change.
  double other = std::max(0.0, measured_step_ms - est_gemm_ms);
  return measured_step_ms / (other + est_gemm_quantized_ms);
}

namespace {

// A quantize decision is written as the formats' family.
std::string_view decisionText(const RecipeEntry& e) {
  return e.decision == Decision::kQuantize ? nameOf(formatFamily(e.lhs_format)) : nameOf(e.decision);
}

}  // namespace

std::string recipeToYaml(const Recipe& r) {
  YAML::Emitter out;
  out.SetDoublePrecision(6);
  out << YAML::Comment(fmt::format(
      "pgq recipe (stage ii): one entry per GEMM, first match wins; edit freely.\n"
      "decision: keep, or the formats' family: {} (FP8 and MX\n"
      "GEMMs are emulated on CPUs: quantize -> dequantize -> f32 GEMM; bf16 runs as a bf16 GEMM). An entry may use\n"
      "`match: REGEX` (with optional direction/role\n"
      "filters) instead of `label:`. GEMMs no entry matches stay in high precision.\n"
      "entry_count detects a file cut short: update or delete it when you add or remove entries.",
      fmt::join(kFormatFamilies, " | ")));
  out << YAML::BeginMap;
  out << YAML::Key << "version" << YAML::Value << 1;
  out << YAML::Key << "name" << YAML::Value << r.name;
  out << YAML::Key << "policy" << YAML::Value << r.policy;
  out << YAML::Key << "model" << YAML::Value << r.model;
  out << YAML::Key << "hardware" << YAML::Value << r.hardware;
  out << YAML::Key << "profile" << YAML::Value << r.profile;
  const RecipeSummary& s = r.summary;
  out << YAML::Key << "summary" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "fwd_quantized" << YAML::Value << fmt::format("{}/{}", s.fwd_quantized, s.fwd_total);
  out << YAML::Key << "bwd_quantized" << YAML::Value << fmt::format("{}/{}", s.bwd_quantized, s.bwd_total);
  out << YAML::Key << "est_gemm_ms" << YAML::Value << s.est_gemm_ms;
  out << YAML::Key << "est_gemm_quantized_ms" << YAML::Value << s.est_gemm_quantized_ms;
  out << YAML::Key << "measured_step_ms" << YAML::Value << s.measured_step_ms;
  out << YAML::Key << "est_step_speedup" << YAML::Value << s.estimatedStepSpeedup();
  out << YAML::EndMap;
  // Before the list, so that a file cut short after any entry still disagrees with it.
  out << YAML::Key << "entry_count" << YAML::Value << r.entries.size();
  out << YAML::Key << "gemms" << YAML::Value << YAML::BeginSeq;
  for (const RecipeEntry& e : r.entries) {
    out << YAML::BeginMap;
    if (!e.label.empty()) out << YAML::Key << "label" << YAML::Value << e.label;
    else out << YAML::Key << "match" << YAML::Value << e.match.text();
    if (e.direction) out << YAML::Key << "direction" << YAML::Value << std::string(e.direction->name());
    if (e.role) out << YAML::Key << "role" << YAML::Value << std::string(nameOf(*e.role));
    out << YAML::Key << "decision" << YAML::Value << std::string(decisionText(e));
    if (e.decision == Decision::kQuantize) {
      out << YAML::Key << "lhs_format" << YAML::Value << e.lhs_format.toString();
      out << YAML::Key << "rhs_format" << YAML::Value << e.rhs_format.toString();
      if (e.smooth > 0) out << YAML::Key << "smooth" << YAML::Value << e.smooth;
      if (e.amax_history > 0) {
        out << YAML::Key << "amax_history" << YAML::Value << e.amax_history;
        out << YAML::Key << "amax_compute" << YAML::Value << e.amax_compute;
      }
      if (e.predict_weight_scale) out << YAML::Key << "predict_weight_scale" << YAML::Value << true;
    }
    if (!e.reason.empty()) out << YAML::Key << "reason" << YAML::Value << e.reason;
    if (e.min_sqnr >= 0) out << YAML::Key << "min_sqnr" << YAML::Value << e.min_sqnr;
    if (e.est_speedup > 0) out << YAML::Key << "est_speedup" << YAML::Value << e.est_speedup;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

void writeRecipe(const std::string& path, const Recipe& recipe) { writeFileAtomically(path, recipeToYaml(recipe)); }

namespace {

QuantFormat readFormat(const ConfigNode& node, std::string_view key, const std::string& text) {
  try {
    return QuantFormat::parse(text);
  } catch (const Error& e) {
    node.fail(key, e.what());
  }
}

RecipeEntry readEntry(const ConfigNode& node) {
  node.allowOnly({"label", "match", "direction", "role", "decision", "lhs_format", "rhs_format", "smooth",
                  "amax_history", "amax_compute", "predict_weight_scale", "reason", "min_sqnr", "est_speedup"});
  RecipeEntry e;
  e.line = node.yaml().Mark().line + 1;
  e.label = node.getString("label", "");
  try {
    e.match = LabelPattern(node.getString("match", ""));
  } catch (const Error& err) {
    node.fail("match", err.what());
  }
  if (e.label.empty() == e.match.empty()) node.failHere("give exactly one of `label` (exact) or `match` (regex)");
  if (node.has("direction")) e.direction = DirectionFilter::parse(node.getEnum("direction", DirectionFilter::names()));
  if (node.has("role")) e.role = parseName<OperandRole>(node.getEnum("role", allNames<OperandRole>()));
  if (!e.label.empty() && (e.direction || e.role))
    node.failHere("direction/role filters go with `match`, not with an exact `label`");
  std::vector<std::string_view> decisions = {"keep", "quantize"};
  for (FormatFamily family : kFormatFamilies) decisions.push_back(nameOf(family));
  const std::string decision = node.getEnum("decision", decisions);
  e.decision = decision == "keep" ? Decision::kKeep : Decision::kQuantize;
  if (e.decision == Decision::kQuantize) {
    const std::string lhs_text = node.getString("lhs_format"), rhs_text = node.getString("rhs_format");
    e.lhs_format = readFormat(node, "lhs_format", lhs_text);
    e.rhs_format = readFormat(node, "rhs_format", rhs_text);
    const QuantFormat& lhs = e.lhs_format;
    const QuantFormat& rhs = e.rhs_format;
    if (lhs.isEmulated() != rhs.isEmulated())
      node.fail("rhs_format", fmt::format("{} and {} mix an int8 operand with an FP8/MX one; give both operands "
                                          "int8 formats or both FP8/MX formats",
                                          lhs_text, rhs_text));
    if (decision != "quantize" && parseFormatFamily(decision) != formatFamily(lhs))
      node.fail("decision", fmt::format("decision '{}' but lhs_format {} is of family {}", decision, lhs_text,
                                        formatFamily(lhs)));
    e.smooth = node.getDouble("smooth", 0.0, 0.0, 1.0);
    if (node.has("amax_history")) {
      e.amax_history = node.getInt("amax_history", 0, 1, 1 << 20);
      e.amax_compute = node.getEnum("amax_compute", {"max", "most_recent"}, "max");
      for (const auto& [key, text, f] : {std::tuple{"lhs_format", lhs_text, lhs}, {"rhs_format", rhs_text, rhs}})
        if (f.granularity != Granularity::kPerTensor || !f.isEmulated())
          node.fail("amax_history", fmt::format("delayed scaling (amax_history) needs per-tensor FP8 formats; {} is {}",
                                                key, text));
    } else if (node.has("amax_compute")) {
      node.failHere("amax_compute goes with amax_history (delayed scaling)");
    }
    e.predict_weight_scale = node.getBool("predict_weight_scale", false);
    if (e.predict_weight_scale && (!lhs.isEmulated() || (lhs.granularity != Granularity::kPerTensor &&
                                                          rhs.granularity != Granularity::kPerTensor)))
      node.fail("predict_weight_scale", "predicted weight scales need a per-tensor FP8/MX format on the weight operand");
  } else if (node.has("lhs_format") || node.has("rhs_format") || node.has("smooth") || node.has("amax_history") ||
             node.has("predict_weight_scale")) {
    node.failHere("a `keep` decision takes no formats, smoothing or scaling");
  }
  e.reason = node.getString("reason", "");
  e.min_sqnr = node.has("min_sqnr") ? node.getDouble("min_sqnr", 0.0, 0.0, 1e300) : -1.0;
  e.est_speedup = node.getDouble("est_speedup", 0.0, 0.0, 1e6);
  return e;
}

// A small edit distance, to suggest the label a user probably meant.
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

Recipe parseRecipe(const std::string& yaml_text, const std::string& source) {
  ConfigNode root = ConfigNode::loadString(yaml_text, source);
  root.allowOnly({"version", "name", "policy", "model", "hardware", "profile", "summary", "entry_count", "gemms"});
  if (root.getInt("version", 1, 1, 1000) != 1) root.fail("version", "this pgq reads recipe version 1");
  Recipe r;
  r.source = source;
  r.name = root.getString("name", source);
  r.policy = root.getString("policy", "");
  r.model = root.getString("model", "");
  if (root.has("model")) r.model_line = root.child("model").yaml().Mark().line + 1;
  r.hardware = root.getString("hardware", "");
  r.profile = root.getString("profile", "");
  if (root.has("summary")) {
    ConfigNode s = root.child("summary");
    // Recipes before session 15 named the quantized counts "int8" whatever the format.
    s.allowOnly({"fwd_quantized", "bwd_quantized", "est_gemm_ms", "est_gemm_quantized_ms", "measured_step_ms",
                 "est_step_speedup", "fwd_int8", "bwd_int8", "est_gemm_int8_ms"});
    r.summary.est_gemm_ms = s.getDouble("est_gemm_ms", 0.0, 0.0, 1e12);
    r.summary.est_gemm_quantized_ms =
        s.getDouble(s.renamed("est_gemm_quantized_ms", "est_gemm_int8_ms"), 0.0, 0.0, 1e12);
    r.summary.measured_step_ms = s.getDouble("measured_step_ms", 0.0, 0.0, 1e12);
    // "quantized/total" counts.
    for (auto [name, quantized, total] :
         {std::tuple{s.renamed("fwd_quantized", "fwd_int8"), &r.summary.fwd_quantized, &r.summary.fwd_total},
          std::tuple{s.renamed("bwd_quantized", "bwd_int8"), &r.summary.bwd_quantized, &r.summary.bwd_total}}) {
      const std::string_view key = name;
      if (!s.has(key)) continue;
      std::string text = s.getString(key);
      if (std::sscanf(text.c_str(), "%d/%d", quantized, total) != 2 || *quantized < 0 || *quantized > *total)
        s.fail(key, fmt::format("expected 'quantized/total', got '{}'", text));
    }
  }
  // The line of each label seen so far: a recipe lists every GEMM, so comparing each
  // entry with all the earlier ones was quadratic in the layers.
  std::unordered_map<std::string, int> label_lines;
  for (const ConfigNode& entry : root.child("gemms").items()) {
    r.entries.push_back(readEntry(entry));
    const RecipeEntry& added = r.entries.back();
    if (added.label.empty()) continue;
    auto [seen, inserted] = label_lines.try_emplace(added.label, added.line);
    if (!inserted) entry.fail("label", fmt::format("GEMM '{}' is listed twice (line {})", added.label, seen->second));
  }
  if (root.has("entry_count")) {
    int64_t recorded = root.getInt("entry_count", 0, INT32_MAX);
    if (recorded != static_cast<int64_t>(r.entries.size())) {
      std::string last = r.entries.empty() ? std::string("there are none")
                                           : fmt::format("the last is '{}', line {}",
                                                         r.entries.back().label.empty() ? r.entries.back().match.text()
                                                                                        : r.entries.back().label,
                                                         r.entries.back().line);
      root.fail("entry_count", fmt::format("the recipe records {} entries but lists {} ({}): the file was cut short, or "
                                           "entries were added or removed by hand; then update entry_count or delete it",
                                           recorded, r.entries.size(), last));
    }
  }
  return r;
}

Recipe loadRecipe(const std::string& path) { return parseRecipe(readTextFile(path, InputKind::kRecipe), path); }

void checkRecipeModel(const Recipe& recipe, const std::string& model, const std::string& model_source) {
  if (recipe.model.empty() || recipe.model == model) return;
  std::string where = recipe.model_line ? fmt::format("{}:{}", recipe.source, recipe.model_line) : recipe.source;
  throw Error(fmt::format("{}: field 'model': the recipe was made for model '{}', not for model '{}'{}; make a recipe "
                          "from a profile of '{}'",
                          where, recipe.model, model,
                          model_source.empty() ? std::string() : fmt::format(" ({})", model_source), model));
}

void checkRecipeRunsExactly(const Recipe& recipe, const HardwareModel& hw) {
  for (const RecipeEntry& e : recipe.entries) {
    if (e.decision != Decision::kQuantize) continue;
    auto what = [&] {
      return e.label.empty() ? fmt::format("entry `match: {}`", e.match.text()) : fmt::format("GEMM '{}'", e.label);
    };
    for (const QuantFormat& format : {e.lhs_format, e.rhs_format}) {
      FormatFamily family = formatFamily(format);
      if (!hw.runsFamily(family))
        throw Error(fmt::format("{}:{}: {}: format {} ({}) does not run on hardware '{}' (it runs: {}); make the "
                                "recipe for this hardware or pass the hardware the recipe was made for",
                                recipe.source, e.line, what(), format.toString(), family, hw.name,
                                fmt::join(hw.formats, ", ")));
    }
    if (e.lhs_format.isEmulated() || hw.runsExactly(e.lhs_format.bits, e.rhs_format.bits)) continue;
    throw Error(fmt::format("{}:{}: {}: {} x {} cannot run exactly on hardware '{}' ({}; a wider pair saturates "
                            "silently): narrow one operand's format",
                            recipe.source, e.line, what(), e.lhs_format.toString(), e.rhs_format.toString(), hw.name,
                            hw.int8Limits()));
  }
}

std::vector<std::pair<std::string, GemmDecision>> resolveRecipe(const Recipe& recipe, const Graph& graph) {
  // A recipe for another model would otherwise fail on its first unknown label, which
  // says less about the mistake.
  checkRecipeModel(recipe, graph.name(), "");
  struct Gemm {
    std::string label;
    GemmDirection direction;
    OperandRoles roles;
    int64_t k;  // the contracting length
  };
  std::vector<Gemm> gemms;
  std::unordered_set<const Node*> live = liveNodes(graph);
  for (const Node* node : graph.postOrder()) {
    // (A GEMM computed only to be measured, stage (i)'s output-error copy, is no GEMM of the model.)
    if (node->op() != Op::kMatMul || !live.count(node) || isMeasuredOnly(graph, *node)) continue;
    const Attrs& a = node->attrs();
    // `pgq ir opt --passes quantize_gemms{...}` can reach here with an untagged graph.
    if (!a.has(AttrKey::kLabel) || !a.has(AttrKey::kDirection) || !a.has(AttrKey::kRoles))
      throw Error(fmt::format("quantize_gemms: matmul %{} has no label/direction/roles; run tag_metadata first",
                              node->name()));
    int64_t k = 1;
    for (int64_t d : a.getInts(AttrKey::kLhsContract)) k *= node->operand(0)->shape().dim(static_cast<int>(d));
    gemms.push_back(
        {a.getString(AttrKey::kLabel), a.getDirection(AttrKey::kDirection), a.getRoles(AttrKey::kRoles), k});
  }
  auto where = [&](const RecipeEntry& e) { return fmt::format("{}:{}", recipe.source, e.line); };
  // A generated recipe has one label entry per GEMM: trying every entry on every GEMM
  // was quadratic in the layers. The first label entry for each label is found by
  // look-up; only the match entries before it are tried in order.
  std::unordered_map<std::string_view, size_t> first_label_entry;
  std::vector<size_t> match_entries;
  for (size_t i = 0; i < recipe.entries.size(); ++i) {
    if (recipe.entries[i].label.empty())
      match_entries.push_back(i);
    else
      first_label_entry.try_emplace(recipe.entries[i].label, i);
  }
  std::vector<bool> used(recipe.entries.size(), false);
  std::vector<std::pair<std::string, GemmDecision>> out;
  for (const Gemm& g : gemms) {
    GemmDecision d;
    d.reason = "no recipe entry: kept in high precision";
    auto label_entry = first_label_entry.find(g.label);
    std::optional<size_t> hit;
    if (label_entry != first_label_entry.end()) hit = label_entry->second;
    for (size_t i : match_entries) {
      if (hit && i > *hit) break;
      const RecipeEntry& e = recipe.entries[i];
      if (e.match.matches(g.label) && (!e.direction || e.direction->matches(g.direction)) &&
          (!e.role || std::find(g.roles.begin(), g.roles.end(), *e.role) != g.roles.end())) {
        hit = i;
        break;
      }
    }
    if (hit) {
      const size_t i = *hit;
      const RecipeEntry& e = recipe.entries[i];
      used[i] = true;
      d.decision = e.decision;
      if (e.decision == Decision::kQuantize) {
        d.lhs_format = e.lhs_format;
        d.rhs_format = e.rhs_format;
        // MX and NVFP4 blocks must tile the contracting dimension (OCP MX has no partial
        // blocks), and a Hadamard transform needs K to be a multiple of its 16.
        for (const auto& [key, f] : {std::pair{"lhs_format", d.lhs_format}, {"rhs_format", d.rhs_format}}) {
          if (f.scale != ScaleKind::kF32 && g.k % f.block != 0)
            throw Error(fmt::format("{}: field '{}': GEMM '{}': {} block {} does not divide its contracting "
                                    "dimension K = {}; keep this GEMM or use a block that divides K",
                                    where(e), key, g.label, formatFamily(f) == FormatFamily::kNvfp4 ? "NVFP4" : "MX",
                                    f.block, g.k));
          if (f.hadamard && g.k % kHadamardBlock != 0)
            throw Error(fmt::format("{}: field '{}': GEMM '{}': the random Hadamard transform (rht) works on blocks "
                                    "of {} along the contracting dimension, and K = {} is not a multiple of {}; "
                                    "drop rht from this GEMM's formats",
                                    where(e), key, g.label, kHadamardBlock, g.k, kHadamardBlock));
          if (f.hadamard && !(d.lhs_format.hadamard && d.rhs_format.hadamard))
            throw Error(fmt::format("{}: field '{}': GEMM '{}': the random Hadamard transform must apply to both "
                                    "operands (the product is unchanged only then); add rht to both formats",
                                    where(e), key, g.label));
        }
      }
      d.smooth = e.smooth;
      d.amax_history = e.amax_history;
      d.amax_compute = e.amax_compute;
      d.predict_weight_scale = e.predict_weight_scale;
      d.reason = e.reason.empty() ? fmt::format("{} entry", where(e)) : e.reason;
    }
    out.emplace_back(g.label, d);
  }
  std::unordered_set<std::string_view> labels;
  for (const Gemm& g : gemms) labels.insert(g.label);
  for (size_t i = 0; i < recipe.entries.size(); ++i) {
    if (used[i]) continue;
    const RecipeEntry& e = recipe.entries[i];
    if (!e.match.empty()) {
      // A regex shadowed by earlier entries is fine; one that matches no GEMM is a typo.
      bool any = std::any_of(gemms.begin(), gemms.end(), [&](const Gemm& g) { return e.match.matches(g.label); });
      if (!any) throw Error(fmt::format("{}: `match: {}` matches no GEMM of model {}", where(e), e.match.text(), graph.name()));
      continue;
    }
    if (labels.count(e.label)) continue;  // shadowed by an earlier entry
    std::vector<std::pair<size_t, std::string>> close;
    for (const Gemm& g : gemms) close.emplace_back(editDistance(e.label, g.label), g.label);
    std::sort(close.begin(), close.end());
    std::vector<std::string> names;
    for (size_t k = 0; k < std::min<size_t>(3, close.size()); ++k) names.push_back(close[k].second);
    throw Error(fmt::format("{}: GEMM '{}' is not in model {} (closest: {}); is the recipe for another model?",
                            where(e), e.label, graph.name(), fmt::join(names, ", ")));
  }
  return out;
}

}  // namespace pgq
