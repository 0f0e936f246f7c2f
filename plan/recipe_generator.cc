#include "plan/recipe_generator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "ir/quant.h"
#include "support/errors.h"

namespace pgq {
namespace {

std::string sqnrText(double s) { return s >= 1e4 ? fmt::format("{:.2g}", s) : fmt::format("{:.3g}", s); }

std::string format(int bits, const std::string& granularity, const std::string& rounding) {
  // A granularity may carry refinements ("channel:clip=mse"); the rounding goes second.
  size_t colon = granularity.find(':');
  std::string base = granularity.substr(0, colon);
  std::string extra = colon == std::string::npos ? "" : granularity.substr(colon);
  return fmt::format("int{}:{}:{}{}", bits, base, rounding, extra);
}

// SQNR of an operand in `fmt`, from the profile. A format the profile did not measure
// (a refinement) is estimated from the channel format with the same bits and
// rounding, or failing that round-to-nearest; `estimated` says so.
double sqnrOf(const OperandProfile& o, const std::string& fmt_text, int bits, const std::string& rounding,
              bool& estimated) {
  if (const FormatStats* f = o.find(fmt_text)) return f->sqnr_mean;
  estimated = true;
  for (const std::string& fallback :
       {format(bits, "channel", rounding), format(bits, "channel", "rtn"), format(8, "channel", "rtn")})
    if (const FormatStats* f = o.find(fallback)) {
      // One bit less divides SQNR by about 4.
      int from = std::stoi(fallback.substr(3, fallback.find(':') - 3));
      return f->sqnr_mean * std::pow(4.0, bits - from);
    }
  throw Error(fmt::format("profile has no statistics usable for {} {} in {}", o.tensor, o.side, fmt_text));
}

bool ruleMatches(const PolicyRule& r, const GemmProfile& g) {
  if (!r.label.matches(g.label)) return false;
  if (r.direction && !r.direction->matches(g.direction)) return false;
  if (r.role && g.lhs().role != r.role && g.rhs().role != r.role) return false;
  if (r.layer_min >= 0 && (g.layer < r.layer_min || g.layer > r.layer_max)) return false;
  return true;
}

struct Choice {
  std::string lhs, rhs;
  double sqnr_lhs = 0, sqnr_rhs = 0;
  bool estimated = false;
  double minSqnr() const { return std::min(sqnr_lhs, sqnr_rhs); }
};

// The formats that would run for `granularity`, narrowing one side when the hardware
// cannot run both at the policy's bits.
Choice chooseFormats(const GemmProfile& g, const HardwareModel& hw, const Policy& policy, const DirectionPolicy& dp,
                     const std::string& granularity) {
  auto rounding = [&](const OperandProfile& o) {
    return o.role == OperandRole::kGradient ? dp.gradient_rounding : dp.rounding;
  };
  int bits_l = std::min(policy.bits, hw.max_bits_one), bits_r = bits_l;
  if (bits_l > hw.max_bits_both) {
    // Narrow the side with the higher SQNR: with independent errors
    // 1/SQNR_C ~ 1/SQNR_A + 1/SQNR_B, the narrowed side's SQNR drops ~4x, so narrowing the
    // side whose SQNR is higher costs less.
    bool est = false;
    double l = sqnrOf(g.lhs(), format(bits_l, "channel", "rtn"), bits_l, "rtn", est);
    double r = sqnrOf(g.rhs(), format(bits_r, "channel", "rtn"), bits_r, "rtn", est);
    (l > r ? bits_l : bits_r) = hw.max_bits_both;
  }
  Choice c;
  c.lhs = format(bits_l, granularity, rounding(g.lhs()));
  c.rhs = format(bits_r, granularity, rounding(g.rhs()));
  c.sqnr_lhs = sqnrOf(g.lhs(), c.lhs, bits_l, rounding(g.lhs()), c.estimated);
  c.sqnr_rhs = sqnrOf(g.rhs(), c.rhs, bits_r, rounding(g.rhs()), c.estimated);
  return c;
}

// The formats of a FP8/MX scheme for this GEMM, with their SQNR from the profile (which
// must have measured them: SQNR of a float format cannot be derived from int8's).
Choice schemeChoice(const GemmProfile& g, const DirectionPolicy& dp, const std::string& scheme,
                    const std::string& profile_path) {
  SchemeFormats f = schemeFormats(scheme, dp.rounding, dp.gradient_rounding);
  Choice c;
  auto pick = [&](const OperandProfile& o, std::string& format, double& sqnr) {
    format = o.role == OperandRole::kGradient ? f.gradient : f.operand;
    const FormatStats* stats = o.find(format);
    if (!stats)
      throw Error(fmt::format("{}: GEMM '{}' {} ({}): the profile has no statistics for {} (scheme {}); profile with "
                              "pgq train --profile-formats {} (it records every format of the scheme)",
                              profile_path, g.label, o.side, o.roleName(), format, scheme, scheme));
    sqnr = stats->sqnr_mean;
  };
  pick(g.lhs(), c.lhs, c.sqnr_lhs);
  pick(g.rhs(), c.rhs, c.sqnr_rhs);
  return c;
}

// Why a scheme cannot take this GEMM at all (empty: it can): an MX block that does not
// divide the contracting dimension.
std::string blockMismatch(const GemmProfile& g, const Choice& c) {
  const int64_t k = g.device_shape.size() == 4 ? g.device_shape[2] : 0;
  for (const std::string& text : {c.lhs, c.rhs}) {
    QuantFormat f = QuantFormat::parse(text);
    if (f.granularity == Granularity::kPerBlock && f.scale != ScaleKind::kF32 && k % f.block != 0)
      return fmt::format("block {} does not divide K = {}", f.block, k);
  }
  return "";
}

}  // namespace

Profile scaleTokens(const Profile& profile, double factor) {
  if (!(factor > 0) || !std::isfinite(factor)) throw Error(fmt::format("token scale must be > 0, got {}", factor));
  Profile out = profile;
  if (factor == 1.0) return out;
  for (GemmProfile& g : out.gemms) {
    const bool lhs_weight = g.lhs().role == OperandRole::kWeight, rhs_weight = g.rhs().role == OperandRole::kWeight;
    // [batch, M, K, N]: the dim the tokens run along.
    const size_t dim = rhs_weight ? 1 : lhs_weight ? 3 : g.gemm_shape[0] > 1 ? 0 : 2;
    auto elems = [](const std::vector<int64_t>& s) {
      return static_cast<double>(s[0]) * static_cast<double>(s[1] * s[2] + s[2] * s[3] + s[1] * s[3]);
    };
    const double before = elems(g.device_shape);
    for (std::vector<int64_t>* shape : {&g.gemm_shape, &g.device_shape})
      (*shape)[dim] = std::max<int64_t>(1, std::llround(static_cast<double>((*shape)[dim]) * factor));
    g.flops = static_cast<int64_t>(static_cast<double>(g.flops) * factor);
    g.bytes = static_cast<int64_t>(static_cast<double>(g.bytes) * elems(g.device_shape) / before);
  }
  out.run.step_ms = 0;  // the profiled step time is not this run's
  return out;
}

Recipe generateRecipe(const Profile& profile, const HardwareModel& hw, const Policy& policy,
                      const std::string& profile_path, const std::map<std::string, double>* scores) {
  Recipe recipe;
  recipe.name = policy.name;
  recipe.policy = policy.name;
  recipe.model = profile.run.model;
  recipe.hardware = hw.name;
  recipe.profile = profile_path;
  RecipeSummary& sum = recipe.summary;
  // The profiled step was measured on this CPU; its non-GEMM time says nothing about a
  // GPU target, whose estimate is then GEMM time only.
  const bool gpu = hw.high_precision != DType::kF32;
  sum.measured_step_ms = gpu ? 0.0 : profile.run.step_ms;
  const bool schemes = policy.formats != std::vector<std::string>{"int8"};
  // The policy's metric, else the default the profile can give (for backward GEMMs;
  // forward ones compare SQNR by default, gemm_metric.h).
  const Metric backward_default = policy.metric.value_or(defaultMetric(profile));
  const bool thresholds = policy.forward.threshold > 0 || policy.backward.threshold > 0 || policy.forward.invert ||
                          policy.backward.invert;
  if (!policy.metric && !scores && thresholds)
    recipe.notes.push_back(
        backward_default == kDefaultMetric
            ? fmt::format("backward thresholds compare the default metric, {}, forward ones min SQNR "
                          "(docs/METRICS.md; --metric sqnr for the paper's)",
                          nameOf(backward_default))
            : fmt::format("thresholds compare min SQNR: the default metric, {}, needs a profile made with pgq train "
                          "--profile-metrics --profile-outputs",
                          nameOf(kDefaultMetric)));
  // With cast_once, the GEMM operands reading one tensor share its cast.
  std::map<std::string, int> readers;
  for (const GemmProfile& g : profile.gemms)
    for (size_t i = 0; i < 2; ++i) readers[g.operands[i].tensor] += 1;
  auto share = [&](const OperandProfile& o) {
    return hw.cast_once ? 1.0 / std::max(1, readers[o.tensor]) : 1.0;
  };
  const std::string kept = fmt::format("kept {}", dtypeName(hw.high_precision));
  // Schemes the hardware does not run natively are skipped (and said so); a policy none
  // of whose schemes runs there is a mistake, not a set of GEMM decisions.
  std::vector<std::string> schemes_here;
  for (const std::string& scheme : policy.formats) {
    std::string family = schemeFamily(scheme);
    if (hw.runsFamily(family))
      schemes_here.push_back(scheme);
    else
      recipe.notes.push_back(fmt::format("policy {} lists {} ({}), which hardware {} does not run natively (it runs: "
                                         "{}): skipped",
                                         policy.name, scheme, family, hw.name, fmt::join(hw.formats, ", ")));
  }
  if (schemes_here.empty())
    throw Error(fmt::format("policy {}: field 'formats' asks for {}, none of which hardware '{}' runs natively (it "
                            "runs: {}); choose another --hardware or another policy",
                            policy.name, fmt::join(policy.formats, ", "), hw.name, fmt::join(hw.formats, ", ")));

  for (const GemmProfile& g : profile.gemms) {
    bool forward = g.direction == GemmDirection::kFwd;
    const Metric metric = policy.metric.value_or(forward ? Metric::kSqnr : backward_default);
    const DirectionPolicy& dp = forward ? policy.forward : policy.backward;
    (forward ? sum.fwd_total : sum.bwd_total) += 1;
    RecipeEntry e;
    e.label = g.label;
    auto choiceFor = [&](const std::string& scheme) {
      return scheme == "int8" ? chooseFormats(g, hw, policy, dp, policy.granularity)
                              : schemeChoice(g, dp, scheme, profile_path);
    };
    // Where the hardware runs attention fused, its batched GEMMs are shares of one flash
    // kernel, in any format (an FP8 flash kernel is not modelled).
    const std::optional<double> fused =
        fusedAttentionUs(hw, g.device_shape, g.direction, {*g.lhs().role, *g.rhs().role});
    auto estimate = [&](const Choice& with) {
      if (fused) return GemmEstimate{*fused, *fused, 0.0};
      return estimateGemm(hw, g.device_shape, hw.high_precision, QuantFormat::parse(with.lhs),
                          QuantFormat::parse(with.rhs), share(g.lhs()), share(g.rhs()));
    };
    Choice c = choiceFor(schemes_here.front());
    GemmEstimate est = estimate(c);
    e.est_speedup = est.speedup();
    e.gemm_shape = g.gemm_shape;
    e.device_shape = g.device_shape;
    e.devices = g.devices;
    e.sharding = g.sharding;
    e.min_sqnr = c.minSqnr();
    std::string sqnr_detail = fmt::format("{} {} {}, {} {} {}", g.lhs().roleName(), c.lhs, sqnrText(c.sqnr_lhs), g.rhs().roleName(),
                                          c.rhs, sqnrText(c.sqnr_rhs));
    auto quantize = [&](const Choice& with, std::string reason) {
      e.decision = Decision::kQuantize;
      e.lhs_format = with.lhs;
      e.rhs_format = with.rhs;
      e.reason = std::move(reason);
      QuantFormat lf = QuantFormat::parse(with.lhs), rf = QuantFormat::parse(with.rhs);
      if (policy.amax_history > 0 && lf.isEmulated() && lf.granularity == Granularity::kPerTensor &&
          rf.granularity == Granularity::kPerTensor) {
        e.amax_history = policy.amax_history;
        e.amax_compute = policy.amax_compute;
      }
      const bool weight_per_tensor = (g.lhs().role == OperandRole::kWeight && lf.isEmulated() &&
                                      lf.granularity == Granularity::kPerTensor) ||
                                     (g.rhs().role == OperandRole::kWeight && rf.isEmulated() &&
                                      rf.granularity == Granularity::kPerTensor);
      e.predict_weight_scale = policy.predict_weight_scales && weight_per_tensor;
    };
    auto keep = [&](std::string reason) {
      e.decision = Decision::kKeep;
      e.reason = std::move(reason);
    };
    // The value the thresholds compare: the ordering's score when one is given, else the
    // policy's metric of these formats.
    auto metricValue = [&](const Choice& with) -> MetricValue {
      if (scores) {
        auto it = scores->find(g.label);
        if (it == scores->end())
          throw Error(fmt::format("the ordering has no score for GEMM '{}' of profile {}", g.label, profile_path));
        return {it->second, false};
      }
      return metricOf(metric, g, with.lhs, with.rhs, with.sqnr_lhs, with.sqnr_rhs, profile_path);
    };
    auto metricText = [&](const Choice& with, const MetricValue& v) {
      if (scores) return fmt::format("ordering score {} (min SQNR {})", sqnrText(v.value), sqnrText(with.minSqnr()));
      if (metric == Metric::kSqnr) return fmt::format("min SQNR {}", sqnrText(v.value));
      return fmt::format("{} {} (min SQNR {})", nameOf(metric), sqnrText(v.value), sqnrText(with.minSqnr()));
    };

    const PolicyRule* rule = nullptr;
    for (const PolicyRule& r : policy.rules)
      if (ruleMatches(r, g)) {
        rule = &r;
        break;
      }
    if (rule) {
      if (rule->action == Decision::kKeep) {
        keep(fmt::format("{}, policy rule ({}): {}", g.direction, rule->describe(), kept));
      } else {
        Choice forced = c;
        if (!rule->lhs_format.empty()) {
          forced.lhs = rule->lhs_format;
          forced.rhs = rule->rhs_format;
          // The only formats the generator does not fit to the hardware itself.
          if (!hw.runsExactly(quantFormatBits(forced.lhs), quantFormatBits(forced.rhs)))
            throw Error(fmt::format("policy {}, rule ({}): forces {} x {} on GEMM '{}', which hardware '{}' cannot "
                                    "run exactly ({}; a wider pair saturates silently): narrow one of the rule's "
                                    "formats",
                                    policy.name, rule->describe(), forced.lhs, forced.rhs, g.label, hw.name,
                                    hw.int8Limits()));
        }
        quantize(forced, fmt::format("{}, policy rule ({}): int8{}", g.direction, rule->describe(),
                                     rule->smooth > 0 ? fmt::format(" with SmoothQuant alpha {}", rule->smooth) : ""));
        e.smooth = rule->smooth;
      }
    } else if (schemes && dp.quantize) {
      // Among the policy's schemes, the first that fits, pays off on the roofline and
      // passes the SQNR threshold; otherwise high precision, with every scheme's reason.
      std::vector<std::string> tried;
      bool done = false;
      for (const std::string& scheme : schemes_here) {
        Choice sc = choiceFor(scheme);
        if (std::string why = blockMismatch(g, sc); !why.empty()) {
          tried.push_back(fmt::format("{}: {}", scheme, why));
          continue;
        }
        GemmEstimate se = estimate(sc);
        if (se.speedup() < policy.min_speedup) {
          tried.push_back(fmt::format("{}: est. {:.2f}x < {:.2f}x", scheme, se.speedup(), policy.min_speedup));
          continue;
        }
        double t = dp.threshold, sq = sc.minSqnr();
        MetricValue mv = metricValue(sc);
        bool pass = dp.invert ? mv.value < t : (t <= 0 || mv.value > t);
        if (!pass) {
          tried.push_back(fmt::format("{}: {} {} {}", scheme, metricText(sc, mv), dp.invert ? ">=" : "<=", sqnrText(t)));
          continue;
        }
        est = se;
        e.est_speedup = se.speedup();
        e.min_sqnr = sq;
        e.metric_value = mv.value;
        std::string before = tried.empty() ? "" : fmt::format("; not {}", fmt::join(tried, "; "));
        quantize(sc, fmt::format("{}, {}{}, est. {:.2f}x on {}: {} ({} {} {}, {} {} {}){}", g.direction,
                                 metricText(sc, mv), t > 0 ? fmt::format(" {} {}", dp.invert ? "<" : ">", sqnrText(t)) : "",
                                 se.speedup(), hw.name, scheme, g.lhs().roleName(), sc.lhs, sqnrText(sc.sqnr_lhs),
                                 g.rhs().roleName(), sc.rhs, sqnrText(sc.sqnr_rhs), before));
        done = true;
        break;
      }
      if (!done) keep(fmt::format("{}, {}: {}", g.direction, kept, fmt::join(tried, "; ")));
    } else if (!dp.quantize) {
      keep(fmt::format("{}, policy {} does not quantize {} GEMMs: {}", g.direction, policy.name,
                       forward ? "forward" : "backward", kept));
    } else if (e.est_speedup < policy.min_speedup) {
      keep(fmt::format("{}, intensity {:.0f} flop/B, est. int8 {:.2f}x (< {:.2f}x) with quantization traffic: not worth "
                       "it, kept f32",
                       g.direction, g.intensity(), e.est_speedup, policy.min_speedup));
    } else {
      double t = dp.threshold;
      MetricValue mv = metricValue(c);
      double s = mv.value;
      e.metric_value = s;
      bool pass = dp.invert ? s < t : (t <= 0 || s > t);
      std::string est_note = c.estimated || mv.estimated ? " (SQNR estimated from another format)" : "";
      if (pass) {
        std::string why = t <= 0 ? metricText(c, mv)
                                 : fmt::format("{} {} {}{}", metricText(c, mv), dp.invert ? "<" : ">", sqnrText(t),
                                               dp.invert ? " (adversarial)" : "");
        quantize(c, fmt::format("{}, {}{}, est. {:.2f}x: int8 ({})", g.direction, why, est_note, e.est_speedup,
                                sqnr_detail));
      } else if (policy.low_sqnr != "keep") {
        Choice refined = chooseFormats(g, hw, policy, dp, policy.low_sqnr);
        e.min_sqnr = refined.minSqnr();
        quantize(refined, fmt::format("{}, {} {} {} at {} scales: int8 with {} scales instead{}",
                                      g.direction, metricText(c, mv), dp.invert ? ">=" : "<=", sqnrText(t),
                                      policy.granularity, policy.low_sqnr,
                                      refined.estimated ? " (their SQNR not profiled)" : ""));
      } else {
        keep(fmt::format("{}, {} {} {}{}: kept f32 ({})", g.direction, metricText(c, mv), dp.invert ? ">=" : "<=",
                         sqnrText(t), est_note, sqnr_detail));
      }
    }
    bool int8 = e.decision == Decision::kQuantize;
    if (int8) (forward ? sum.fwd_int8 : sum.bwd_int8) += 1;
    sum.est_gemm_ms += est.high_precision_us / 1e3;
    sum.est_gemm_int8_ms += (int8 ? est.int8Us() : est.high_precision_us) / 1e3;
    recipe.entries.push_back(std::move(e));
  }
  // A model fitted to measured GEMMs says when it is asked about shapes far from them.
  int outside = 0;
  double farthest = 1.0;
  for (const GemmProfile& g : profile.gemms) {
    if (g.device_shape.size() != 4) continue;
    const double x = extrapolationOf(hw, {g.device_shape[0], g.device_shape[1], g.device_shape[2], g.device_shape[3]});
    outside += x > 2.0;
    farthest = std::max(farthest, x);
  }
  if (outside > 0)
    recipe.notes.push_back(fmt::format("{} GEMMs lie more than 2x outside the shapes hardware {} was measured on (up "
                                       "to {:.3g}x in a dimension): their estimates extrapolate its model",
                                       outside, hw.name, farthest));
  return recipe;
}

std::string explainRecipe(const Recipe& r) {
  const RecipeSummary& s = r.summary;
  std::string out = fmt::format("recipe {} for model {} on {} (profile {})\n", r.name, r.model, r.hardware, r.profile);
  // Quantized GEMMs by format family ("int8", "fp8", ...).
  std::map<std::string, int> families;
  bool emulated = false;
  for (const RecipeEntry& e : r.entries)
    if (e.decision == Decision::kQuantize) {
      QuantFormat f = QuantFormat::parse(e.lhs_format);
      families[std::string(formatFamily(f))] += 1;
      emulated = emulated || f.isEmulated();
    }
  std::string in = families.size() == 1 ? fmt::format("in {}", families.begin()->first) : "quantized";
  out += fmt::format("  forward GEMMs:  {:>3} of {:>3} {}\n", s.fwd_int8, s.fwd_total, in);
  out += fmt::format("  backward GEMMs: {:>3} of {:>3} {}\n", s.bwd_int8, s.bwd_total, in);
  if (families.size() > 1)
    for (const auto& [family, n] : families) out += fmt::format("    {:<8} {:>3} GEMMs\n", family, n);
  for (const std::string& note : r.notes) out += fmt::format("  note: {}\n", note);
  if (emulated)
    out += fmt::format("  FP8/MX GEMMs are emulated on CPUs (quantize -> dequantize -> f32 GEMM: the format's "
                       "numerics at f32 speed); the estimates below are hardware {}'s\n",
                       r.hardware);
  // Why GEMMs were kept, grouped by the first words of their reason.
  std::map<std::string, int> kept;
  for (const RecipeEntry& e : r.entries) {
    if (e.decision != Decision::kKeep) continue;
    // The category of the first reason the text gives (a scheme list gives one per scheme).
    const std::pair<const char*, const char*> kMarkers[] = {{"does not divide", "MX block does not divide K"},
                                                            {"min SQNR", "failed the SQNR threshold"},
                                                            {"not worth it", "roofline: not faster quantized"},
                                                            {"x < ", "roofline: not faster quantized"},
                                                            {"policy rule", "a policy rule"}};
    std::string why = "direction not quantized by the policy";
    size_t first = std::string::npos;
    for (const auto& [marker, category] : kMarkers)
      if (size_t at = e.reason.find(marker); at < first) {
        first = at;
        why = category;
      }
    kept[why] += 1;
  }
  for (const auto& [why, n] : kept) out += fmt::format("  kept in high precision: {:>3} ({})\n", n, why);
  std::vector<const RecipeEntry*> lowest;
  for (const RecipeEntry& e : r.entries)
    if (e.min_sqnr > 0) lowest.push_back(&e);
  std::sort(lowest.begin(), lowest.end(), [](auto* a, auto* b) { return a->min_sqnr < b->min_sqnr; });
  const bool parallel = std::any_of(r.entries.begin(), r.entries.end(), [](const RecipeEntry& e) { return e.devices > 1; });
  if (parallel) {
    // What the roofline saw: each device's part of a split GEMM.
    std::map<ShardingKind, std::pair<int, const RecipeEntry*>> kinds;
    for (const RecipeEntry& e : r.entries)
      if (!e.gemm_shape.empty()) {
        auto& [count, example] = kinds[e.sharding];
        if (count++ == 0) example = &e;
      }
    out += fmt::format("  tensor parallel over {} devices; the roofline used per-device shapes (M,K,N):\n",
                       r.entries.front().devices);
    for (const auto& [kind, entry] : kinds)
      out += fmt::format("    {:<10} {:>3} GEMMs, e.g. {:<24} {:>16} -> per device {}\n", nameOf(kind), entry.first,
                         entry.second->label, gemmShapeText(entry.second->gemm_shape),
                         gemmShapeText(entry.second->device_shape));
  }
  out += parallel ? "  lowest min-input SQNR (global shape, per device):\n" : "  lowest min-input SQNR:\n";
  for (size_t i = 0; i < std::min<size_t>(5, lowest.size()); ++i) {
    out += fmt::format("    {:<28} {:>9}  {}", lowest[i]->label, sqnrText(lowest[i]->min_sqnr),
                       lowest[i]->decision == Decision::kKeep ? std::string("keep")
                                                              : std::string(formatFamily(QuantFormat::parse(lowest[i]->lhs_format))));
    if (parallel)
      out += fmt::format("  {} / {}", gemmShapeText(lowest[i]->gemm_shape), gemmShapeText(lowest[i]->device_shape));
    out += "\n";
  }
  out += fmt::format("  estimated GEMM time on {}: {:.1f} ms -> {:.1f} ms ({:.2f}x)\n", r.hardware, s.est_gemm_ms, s.est_gemm_int8_ms,
                     s.est_gemm_ms / std::max(s.est_gemm_int8_ms, 1e-9));
  if (s.measured_step_ms > 0)
    out += fmt::format("  estimated step time: {:.1f} ms -> {:.1f} ms ({:.2f}x; non-GEMM time from the profiled run)\n",
                       s.measured_step_ms, s.measured_step_ms / s.estimatedStepSpeedup(), s.estimatedStepSpeedup());
  return out;
}

}  // namespace pgq
