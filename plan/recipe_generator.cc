#include "plan/recipe_generator.h"

#include <algorithm>
#include <cmath>
#include <map>

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

}  // namespace

Recipe generateRecipe(const Profile& profile, const HardwareModel& hw, const Policy& policy,
                      const std::string& profile_path) {
  Recipe recipe;
  recipe.name = policy.name;
  recipe.policy = policy.name;
  recipe.model = profile.run.model;
  recipe.hardware = hw.name;
  recipe.profile = profile_path;
  RecipeSummary& sum = recipe.summary;
  sum.measured_step_ms = profile.run.step_ms;

  for (const GemmProfile& g : profile.gemms) {
    bool forward = g.direction == GemmDirection::kFwd;
    const DirectionPolicy& dp = forward ? policy.forward : policy.backward;
    (forward ? sum.fwd_total : sum.bwd_total) += 1;
    RecipeEntry e;
    e.label = g.label;
    Choice c = chooseFormats(g, hw, policy, dp, policy.granularity);
    auto stochastic = [](const std::string& format) {
      return QuantFormat::parse(format).rounding == Rounding::kStochastic;
    };
    GemmEstimate est = estimateGemm(hw, g.device_shape, DType::kF32, stochastic(c.lhs), stochastic(c.rhs));
    e.est_speedup = est.speedup();
    e.gemm_shape = g.gemm_shape;
    e.device_shape = g.device_shape;
    e.devices = g.devices;
    e.sharding = g.sharding;
    e.min_sqnr = c.minSqnr();
    std::string sqnr_detail = fmt::format("{} {} {}, {} {} {}", g.lhs().roleName(), c.lhs, sqnrText(c.sqnr_lhs), g.rhs().roleName(),
                                          c.rhs, sqnrText(c.sqnr_rhs));
    auto quantize = [&](const Choice& with, std::string reason) {
      e.decision = Decision::kInt8;
      e.lhs_format = with.lhs;
      e.rhs_format = with.rhs;
      e.reason = std::move(reason);
    };
    auto keep = [&](std::string reason) {
      e.decision = Decision::kKeep;
      e.reason = std::move(reason);
    };

    const PolicyRule* rule = nullptr;
    for (const PolicyRule& r : policy.rules)
      if (ruleMatches(r, g)) {
        rule = &r;
        break;
      }
    if (rule) {
      if (rule->action == Decision::kKeep) {
        keep(fmt::format("{}, policy rule ({}): kept f32", g.direction, rule->describe()));
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
    } else if (!dp.quantize) {
      keep(fmt::format("{}, policy {} does not quantize {} GEMMs: kept f32", g.direction, policy.name,
                       forward ? "forward" : "backward"));
    } else if (e.est_speedup < policy.min_speedup) {
      keep(fmt::format("{}, intensity {:.0f} flop/B, est. int8 {:.2f}x (< {:.2f}x) with quantization traffic: not worth "
                       "it, kept f32",
                       g.direction, g.intensity(), e.est_speedup, policy.min_speedup));
    } else {
      double t = dp.threshold;
      double s = c.minSqnr();
      bool pass = dp.invert ? s < t : (t <= 0 || s > t);
      std::string est_note = c.estimated ? " (SQNR estimated from another format)" : "";
      if (pass) {
        std::string why = t <= 0 ? fmt::format("min SQNR {}", sqnrText(s))
                                 : fmt::format("min SQNR {} {} {}{}", sqnrText(s), dp.invert ? "<" : ">", sqnrText(t),
                                               dp.invert ? " (adversarial)" : "");
        quantize(c, fmt::format("{}, {}{}, est. {:.2f}x: int8 ({})", g.direction, why, est_note, e.est_speedup,
                                sqnr_detail));
      } else if (policy.low_sqnr != "keep") {
        Choice refined = chooseFormats(g, hw, policy, dp, policy.low_sqnr);
        e.min_sqnr = refined.minSqnr();
        quantize(refined, fmt::format("{}, min SQNR {} {} {} at {} scales: int8 with {} scales instead{}",
                                      g.direction, sqnrText(s), dp.invert ? ">=" : "<=", sqnrText(t),
                                      policy.granularity, policy.low_sqnr,
                                      refined.estimated ? " (their SQNR not profiled)" : ""));
      } else {
        keep(fmt::format("{}, min SQNR {} {} {}{}: kept f32 ({})", g.direction, sqnrText(s), dp.invert ? ">=" : "<=",
                         sqnrText(t), est_note, sqnr_detail));
      }
    }
    bool int8 = e.decision == Decision::kInt8;
    if (int8) (forward ? sum.fwd_int8 : sum.bwd_int8) += 1;
    sum.est_gemm_ms += est.high_precision_us / 1e3;
    sum.est_gemm_int8_ms += (int8 ? est.int8Us() : est.high_precision_us) / 1e3;
    recipe.entries.push_back(std::move(e));
  }
  return recipe;
}

std::string explainRecipe(const Recipe& r) {
  const RecipeSummary& s = r.summary;
  std::string out = fmt::format("recipe {} for model {} on {} (profile {})\n", r.name, r.model, r.hardware, r.profile);
  out += fmt::format("  forward GEMMs:  {:>3} of {:>3} in int8\n", s.fwd_int8, s.fwd_total);
  out += fmt::format("  backward GEMMs: {:>3} of {:>3} in int8\n", s.bwd_int8, s.bwd_total);
  // Why GEMMs were kept, grouped by the first words of their reason.
  std::map<std::string, int> kept;
  for (const RecipeEntry& e : r.entries) {
    if (e.decision != Decision::kKeep) continue;
    std::string why = e.reason.find("min SQNR") != std::string::npos   ? "failed the SQNR threshold"
                      : e.reason.find("not worth it") != std::string::npos ? "roofline: not faster in int8"
                      : e.reason.find("policy rule") != std::string::npos  ? "a policy rule"
                                                                            : "direction not quantized by the policy";
    kept[why] += 1;
  }
  for (const auto& [why, n] : kept) out += fmt::format("  kept in f32: {:>3} ({})\n", n, why);
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
    out += fmt::format("    {:<28} {:>9}  {}", lowest[i]->label, sqnrText(lowest[i]->min_sqnr), lowest[i]->decision);
    if (parallel)
      out += fmt::format("  {} / {}", gemmShapeText(lowest[i]->gemm_shape), gemmShapeText(lowest[i]->device_shape));
    out += "\n";
  }
  out += fmt::format("  estimated GEMM time: {:.1f} ms -> {:.1f} ms ({:.2f}x)\n", s.est_gemm_ms, s.est_gemm_int8_ms,
                     s.est_gemm_ms / std::max(s.est_gemm_int8_ms, 1e-9));
  if (s.measured_step_ms > 0)
    out += fmt::format("  estimated step time: {:.1f} ms -> {:.1f} ms ({:.2f}x; non-GEMM time from the profiled run)\n",
                       s.measured_step_ms, s.measured_step_ms / s.estimatedStepSpeedup(), s.estimatedStepSpeedup());
  return out;
}

}  // namespace pgq
