#include "plan/policy.h"

#include <algorithm>
#include <charconv>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <re2/re2.h>

#include "support/config_file.h"
#include "support/errors.h"

namespace pgq {

std::string PolicyRule::describe() const {
  std::vector<std::string> parts;
  if (!label.empty()) parts.push_back(fmt::format("label ~ {}", label.text()));
  if (direction) parts.push_back(fmt::format("direction {}", direction->name()));
  if (role) parts.push_back(fmt::format("role {}", *role));
  if (layer_min >= 0 || layer_max >= 0) parts.push_back(fmt::format("layers {}..{}", layer_min, layer_max));
  return parts.empty() ? std::string("every GEMM") : fmt::format("{}", fmt::join(parts, ", "));
}

ScaleLayout ScaleLayout::parse(std::string_view text) {
  // The granularity is the format's second field and the refinements follow its
  // rounding: "channel:clip=mse" is int8:channel:rtn:clip=mse.
  const size_t colon = std::min(text.find(':'), text.size());
  return {QuantFormat::parse(fmt::format("int8:{}:rtn{}", text.substr(0, colon), text.substr(colon)))};
}

std::string ScaleLayout::text() const {
  // toString() writes int8:<granularity>:rtn[:<refinement>...]: all but the element and
  // the rounding.
  const std::string full = format.toString();
  const size_t granularity = full.find(':') + 1, rounding = full.find(':', granularity);
  const size_t refinements = full.find(':', rounding + 1);
  return full.substr(granularity, rounding - granularity) +
         (refinements == std::string::npos ? std::string() : full.substr(refinements));
}

QuantFormat ScaleLayout::withBits(int bits, Rounding rounding) const {
  QuantFormat f = format;
  f.bits = bits;
  f.rounding = rounding;
  return f;
}

namespace {

bool parseNumber(const std::string& text, double& out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size() && out >= 0;
}

// The scale layout `text` gives field `key`.
ScaleLayout readLayout(const ConfigNode& node, std::string_view key, const std::string& text) {
  try {
    return ScaleLayout::parse(text);
  } catch (const Error&) {
    node.fail(key, fmt::format("expected tensor, channel or block<N> (optionally with :asym, :clip=mse or "
                               ":clip=p<pct>), got '{}'",
                               text));
  }
}

Rounding readRounding(const ConfigNode& node, std::string_view key, Rounding fallback) {
  return node.getEnum(key, {"rtn", "sr"}, fallback == Rounding::kNearest ? "rtn" : "sr") == "sr" ? Rounding::kStochastic
                                                                                                : Rounding::kNearest;
}

DirectionPolicy readDirection(const ConfigNode& node) {
  node.allowOnly({"quantize", "threshold", "invert", "rounding", "gradient_rounding"});
  DirectionPolicy d;
  d.quantize = node.getBool("quantize");
  d.threshold = node.getDouble("threshold", 0.0, 0.0, 1e12);
  d.invert = node.getBool("invert", false);
  if (d.invert && d.threshold <= 0) node.fail("invert", "needs a threshold > 0");
  d.rounding = readRounding(node, "rounding", Rounding::kNearest);
  d.gradient_rounding = readRounding(node, "gradient_rounding", d.rounding);
  return d;
}

PolicyRule readRule(const ConfigNode& node) {
  node.allowOnly({"label", "direction", "role", "layers", "action", "lhs_format", "rhs_format", "smooth"});
  PolicyRule r;
  try {
    r.label = LabelPattern(node.getString("label", ""));
  } catch (const Error& e) {
    node.fail("label", e.what());
  }
  if (node.has("direction")) r.direction = DirectionFilter::parse(node.getEnum("direction", DirectionFilter::names()));
  if (node.has("role")) r.role = parseName<OperandRole>(node.getEnum("role", allNames<OperandRole>()));
  if (node.has("layers")) {
    std::vector<ConfigNode> range = node.child("layers").items();
    if (range.size() != 2) node.fail("layers", "expected [first, last]");
    r.layer_min = range[0].asInt();
    r.layer_max = range[1].asInt();
    if (r.layer_min < 0 || r.layer_max < r.layer_min) node.fail("layers", "expected 0 <= first <= last");
  }
  r.action = node.getEnum("action", {"quantize", "keep"}) == "quantize" ? Decision::kQuantize : Decision::kKeep;
  for (auto [key, field] : {std::pair{"lhs_format", &r.lhs_format}, {"rhs_format", &r.rhs_format}}) {
    const std::string text = node.getString(key, "");
    if (text.empty()) continue;
    if (r.action != Decision::kQuantize) node.fail(key, "only a quantize rule can name formats");
    try {
      *field = QuantFormat::parse(text);
    } catch (const Error& e) {
      node.fail(key, e.what());
    }
  }
  if (r.lhs_format.has_value() != r.rhs_format.has_value())
    node.fail("lhs_format", "give both lhs_format and rhs_format, or neither");
  if (r.lhs_format && r.lhs_format->isEmulated() != r.rhs_format->isEmulated())
    node.fail("rhs_format", fmt::format("{} and {} mix an int8 operand with an FP8/MX one; give both operands int8 "
                                        "formats or both FP8/MX formats",
                                        r.lhs_format->toString(), r.rhs_format->toString()));
  r.smooth = node.getDouble("smooth", 0.0, 0.0, 1.0);
  if (r.smooth > 0 && r.action != Decision::kQuantize) node.fail("smooth", "only a quantize rule can ask for SmoothQuant");
  return r;
}

Policy fromNode(const ConfigNode& root) {
  root.allowOnly({"name", "forward", "backward", "bits", "granularity", "min_speedup", "low_sqnr", "rules", "formats",
                  "scaling", "metric", "hadamard"});
  Policy p;
  p.name = root.getString("name", root.file());
  p.source = root.file();
  p.forward = readDirection(root.child("forward"));
  p.backward = readDirection(root.child("backward"));
  p.bits = static_cast<int>(root.getInt("bits", 8, 2, 8));
  p.granularity = readLayout(root, "granularity", root.getString("granularity", "channel"));
  p.min_speedup = root.getDouble("min_speedup", 1.05, 0.0, 100.0);
  if (root.has("metric")) {
    std::string name = root.getString("metric");
    if (!parseMetric(name)) root.fail("metric", fmt::format("unknown metric '{}'; expected one of {}", name, metricNames()));
    p.metric = *parseMetric(name);
  }
  if (std::string low_sqnr = root.getString("low_sqnr", "keep"); low_sqnr != "keep")
    p.low_sqnr = readLayout(root, "low_sqnr", low_sqnr);
  if (root.has("formats")) {
    p.formats.clear();
    for (const ConfigNode& item : root.child("formats").items()) {
      std::string name = item.asString();
      std::optional<Scheme> scheme = parseScheme(name);
      if (!scheme)
        item.failHere(fmt::format("unknown format scheme '{}' (expected one of {})", name, fmt::join(kFormatSchemes, ", ")));
      if (std::find(p.formats.begin(), p.formats.end(), *scheme) != p.formats.end())
        item.failHere(fmt::format("format scheme '{}' is listed twice", name));
      p.formats.push_back(*scheme);
    }
    if (p.formats.empty()) root.fail("formats", "lists no format scheme");
  }
  if (root.has("scaling")) {
    ConfigNode scaling = root.child("scaling");
    scaling.allowOnly({"amax_history", "amax_compute", "predict_weight_scales"});
    p.amax_history = scaling.has("amax_history") || !scaling.has("predict_weight_scales")
                         ? scaling.getInt("amax_history", 1, 1 << 20)
                         : 0;
    p.predict_weight_scales = scaling.getBool("predict_weight_scales", false);
    p.amax_compute = scaling.getEnum("amax_compute", {"max", "most_recent"}, "max");
    bool per_tensor_fp8 = std::any_of(p.formats.begin(), p.formats.end(),
                                      [](Scheme f) { return f == Scheme::kFp8 || f == Scheme::kFp8E4m3; });
    if (!per_tensor_fp8)
      root.fail("scaling", "delayed scaling (amax_history) applies to the per-tensor FP8 schemes fp8 and fp8_e4m3; "
                           "`formats` lists neither");
  }
  if (root.has("hadamard")) {
    const std::string text = root.getString("hadamard");
    p.hadamard = DirectionFilter::parse(text);
    if (!p.hadamard)
      root.fail("hadamard", fmt::format("unknown direction '{}' (expected fwd, bwd_dgrad, bwd_wgrad or bwd)", text));
    const bool four_bit = std::any_of(p.formats.begin(), p.formats.end(), [](Scheme f) {
      return familyOf(f) == FormatFamily::kNvfp4 || familyOf(f) == FormatFamily::kMxfp4;
    });
    if (!four_bit)
      root.fail("hadamard", "the random Hadamard transform applies to the 4-bit schemes nvfp4 and mxfp4; `formats` "
                            "lists neither");
  }
  if (root.has("rules"))
    for (const ConfigNode& rule : root.child("rules").items()) p.rules.push_back(readRule(rule));
  return p;
}

}  // namespace

std::optional<Policy> standardPolicy(const std::string& name) {
  // F[>T1][+B[_SR][>T2|<T2]]; every group that takes part in a match is non-empty.
  static const RE2 kName(R"(F(?:>([0-9.eE+-]+))?(\+B(_SR)?(?:([<>])([0-9.eE+-]+))?)?)");
  std::string forward_threshold, backward, sr, comparison, backward_threshold;
  if (!RE2::FullMatch(name, kName, &forward_threshold, &backward, &sr, &comparison, &backward_threshold))
    return std::nullopt;
  Policy p;
  p.name = name;
  p.source = fmt::format("<standard policy {}>", name);
  p.forward.quantize = true;
  if (!forward_threshold.empty() && !parseNumber(forward_threshold, p.forward.threshold)) return std::nullopt;
  if (!backward.empty()) {
    p.backward.quantize = true;
    if (!sr.empty()) p.backward.gradient_rounding = Rounding::kStochastic;
    if (!comparison.empty()) {
      if (!parseNumber(backward_threshold, p.backward.threshold)) return std::nullopt;
      p.backward.invert = comparison == "<";
      if (p.backward.invert && p.backward.threshold <= 0) return std::nullopt;
    }
  }
  return p;
}

Policy parsePolicy(const std::string& yaml_text, const std::string& source) {
  return fromNode(ConfigNode::loadString(yaml_text, source));
}

Policy loadPolicy(const std::string& spec) {
  if (std::optional<Policy> p = standardPolicy(spec)) return *p;
  std::error_code ec;
  if (!std::filesystem::exists(spec, ec))
    throw Error(fmt::format("policy '{}' is neither a standard policy (F, F+B, F+B_SR, F+B_SR>T, F+B_SR<T, "
                            "F>T1+B_SR>T2) nor an existing file",
                            spec));
  return fromNode(ConfigNode::loadFile(spec, InputKind::kPolicy));
}

}  // namespace pgq
