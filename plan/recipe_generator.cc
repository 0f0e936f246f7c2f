#include "plan/recipe_generator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/errors.h"

namespace pgq {
namespace {

std::string sqnrText(double s) { return s >= 1e4 ? fmt::format("{:.2g}", s) : fmt::format("{:.3g}", s); }

// SQNR of an operand in `format`, from the profile. A format the profile did not measure
// (a refinement) is estimated from the channel format with the same bits and
// rounding, or failing that round-to-nearest; `estimated` says so.
double sqnrOf(const OperandProfile& o, const QuantFormat& format, bool& estimated) {
  if (const FormatStats* f = o.find(format)) return f->sqnr_mean;
  estimated = true;
  for (const QuantFormat& fallback :
       {perChannelFormat(format.bits, format.rounding), perChannelFormat(format.bits), perChannelFormat(8)})
    if (const FormatStats* f = o.find(fallback)) {
      // One bit less divides SQNR by about 4.
      return f->sqnr_mean * std::pow(4.0, format.bits - fallback.bits);
    }
  throw Error(fmt::format("profile has no statistics usable for {} {} in {}", o.tensor, o.sideName(),
                          format.toString()));
}

bool ruleMatches(const PolicyRule& r, const GemmProfile& g) {
  if (!r.label.matches(g.label)) return false;
  if (r.direction && !r.direction->matches(g.direction)) return false;
  if (r.role && g.lhs().role != r.role && g.rhs().role != r.role) return false;
  if (r.layer_min >= 0 && (g.layer < r.layer_min || g.layer > r.layer_max)) return false;
  return true;
}

const PolicyRule* matchingRule(const Policy& policy, const GemmProfile& g) {
  for (const PolicyRule& r : policy.rules)
    if (ruleMatches(r, g)) return &r;
  return nullptr;
}

const DirectionPolicy& directionPolicy(const Policy& policy, const GemmProfile& g) {
  return isBackward(g.direction) ? policy.backward : policy.forward;
}

// The formats of a GEMM's operands, with their SQNR from the profile.
struct Choice {
  QuantFormat lhs, rhs;
  double sqnr_lhs = 0, sqnr_rhs = 0;
  bool estimated = false;  // an SQNR derived from another format's
  double minSqnr() const { return std::min(sqnr_lhs, sqnr_rhs); }
};

// The int8 formats that would run with `layout`, narrowing one side when the hardware
// cannot run both at the policy's bits.
Choice chooseFormats(const GemmProfile& g, const HardwareModel& hw, const Policy& policy, const DirectionPolicy& dp,
                     const ScaleLayout& layout) {
  auto rounding = [&](const OperandProfile& o) {
    return o.role == OperandRole::kGradient ? dp.gradient_rounding : dp.rounding;
  };
  auto choice = [&](int bits_l, int bits_r) {
    Choice c;
    c.lhs = layout.withBits(bits_l, rounding(g.lhs()));
    c.rhs = layout.withBits(bits_r, rounding(g.rhs()));
    c.sqnr_lhs = sqnrOf(g.lhs(), c.lhs, c.estimated);
    c.sqnr_rhs = sqnrOf(g.rhs(), c.rhs, c.estimated);
    return c;
  };
  const int bits = std::min(policy.bits, hw.max_bits_one);
  if (bits <= hw.max_bits_both) return choice(bits, bits);
  // Narrow the side that costs less: the choice whose weaker operand keeps the higher
  // SQNR (then the higher combined SQNR, 1/SQNR_C ~ 1/SQNR_A + 1/SQNR_B), each operand
  // in the format it would run, its rounding included. Comparing round-to-nearest
  // SQNRs narrowed a gradient that runs stochastic rounding (2x noisier) where narrowing
  // the activation kept the GEMM above the threshold (session 17's hunt).
  const Choice narrow_l = choice(hw.max_bits_both, bits), narrow_r = choice(bits, hw.max_bits_both);
  auto combined = [](const Choice& c) { return 1.0 / (1.0 / c.sqnr_lhs + 1.0 / c.sqnr_rhs); };
  if (narrow_l.minSqnr() != narrow_r.minSqnr()) return narrow_l.minSqnr() > narrow_r.minSqnr() ? narrow_l : narrow_r;
  return combined(narrow_l) >= combined(narrow_r) ? narrow_l : narrow_r;
}

bool isFourBit(Scheme scheme) {
  return familyOf(scheme) == FormatFamily::kNvfp4 || familyOf(scheme) == FormatFamily::kMxfp4;
}

// The formats of a FP8/MX/FP4 scheme for this GEMM, with their SQNR from the profile
// (which must have measured them: SQNR of a float format cannot be derived from int8's).
// Weights take the scheme's weight format (NVFP4's 16x16 tiles); both operands of a
// 4-bit GEMM take the random Hadamard transform where the policy's `hadamard` says.
Choice schemeChoice(const GemmProfile& g, const Policy& policy, const DirectionPolicy& dp, Scheme scheme,
                    const std::string& profile_path) {
  SchemeFormats f = schemeFormats(scheme, dp.rounding, dp.gradient_rounding);
  // A K that is no multiple of the transform's block leaves the transform out: the
  // scheme's own block (16 or 32) does not divide it either, so blockMismatch() refuses
  // the GEMM before it could run.
  const int64_t k = g.device_shape.size() == 4 ? g.device_shape[2] : 0;
  const bool hadamard = isFourBit(scheme) && policy.hadamard && policy.hadamard->matches(g.direction) &&
                        k % kHadamardBlock == 0;
  Choice c;
  auto pick = [&](const OperandProfile& o, QuantFormat& format, double& sqnr) {
    format = o.role == OperandRole::kGradient ? f.gradient : o.role == OperandRole::kWeight ? f.weight : f.operand;
    format.hadamard = hadamard;
    const FormatStats* stats = o.find(format);
    if (!stats)
      throw Error(fmt::format("{}: GEMM '{}' {} ({}): the profile has no statistics for {} (scheme {}); profile with "
                              "pgq train --profile-formats {} (it records every format of the scheme)",
                              profile_path, g.label, o.sideName(), o.roleName(), format.toString(), scheme, scheme));
    sqnr = stats->sqnr_mean;
  };
  pick(g.lhs(), c.lhs, c.sqnr_lhs);
  pick(g.rhs(), c.rhs, c.sqnr_rhs);
  return c;
}

// The MX block of `c` that does not divide the contracting dimension (OCP MX has no
// partial blocks), so that the scheme cannot take this GEMM at all; 0 when none.
int blockMismatch(const GemmProfile& g, const Choice& c) {
  const int64_t k = g.device_shape.size() == 4 ? g.device_shape[2] : 0;
  for (const QuantFormat* f : {&c.lhs, &c.rhs})
    if (f->granularity == Granularity::kPerBlock && f->scale != ScaleKind::kF32 && k % f->block != 0) return f->block;
  return 0;
}

// On a CPU (f32 high precision) an int8 pair runs as pgq's int8 GEMM, whose int32 sums
// are exact up to K = kCpuInt8MaxK: the K of a GEMM deeper than that (a weight gradient
// over more tokens than that per step), or 0. pgq train refuses such a GEMM in int8.
int64_t int8TooDeep(const GemmProfile& g, const Choice& c, const HardwareModel& hw) {
  const int64_t k = g.device_shape.size() == 4 ? g.device_shape[2] : 0;
  const bool int8 = !c.lhs.isEmulated() && !c.rhs.isEmulated();
  return hw.high_precision == DType::kF32 && int8 && k > kCpuInt8MaxK ? k : 0;
}

// GPU tensor cores run FP8, MX and FP4 GEMMs only on operands whose rows are 16-byte
// aligned: cuBLASLt's FP8 kernels and torch._scaled_mm need K and N multiples of 16
// (Transformer Engine asserts it before an FP8 GEMM). The first of K and N (this GEMM's
// contracting and output-column dims on its device) that is not, or 0 when both are or
// the formats are not such (int8 on a CPU, bf16).
int64_t alignmentMismatch(const GemmProfile& g, const Choice& c) {
  auto tensorCore = [](const QuantFormat& f) { return f.isEmulated() && f.element != Element::kBf16; };
  if (g.device_shape.size() != 4 || !(tensorCore(c.lhs) || tensorCore(c.rhs))) return 0;
  for (int64_t dim : {g.device_shape[2], g.device_shape[3]})
    if (dim % 16 != 0) return dim;
  return 0;
}

// What every GEMM's decision reads: generateRecipe's inputs and what it derives from
// them once.
struct Context {
  const HardwareModel& hw;
  const Policy& policy;
  const std::string& profile_path;
  const std::map<std::string, double>* scores;  // an ordering given from outside, or null
  // The policy's schemes the hardware runs natively, when the policy lists schemes
  // other than int8 alone (empty: the int8 path).
  std::vector<Scheme> schemes;
  Metric backward_metric;              // the policy's metric, else the profile's default
  std::map<std::string, int> readers;  // the GEMM operands reading each tensor
  std::string kept;                    // "kept f32": the hardware's high-precision dtype

  // What the thresholds compare for `g` (forward GEMMs compare SQNR by default).
  Metric metricFor(const GemmProfile& g) const {
    return policy.metric.value_or(isBackward(g.direction) ? backward_metric : Metric::kSqnr);
  }
  Choice choice(const GemmProfile& g, Scheme scheme) const {
    return scheme == Scheme::kInt8 ? chooseFormats(g, hw, policy, directionPolicy(policy, g), policy.granularity)
                                   : schemeChoice(g, policy, directionPolicy(policy, g), scheme, profile_path);
  }
  GemmEstimate estimate(const GemmProfile& g, const Choice& with) const {
    // Where the hardware runs attention fused, its batched GEMMs are shares of one flash
    // kernel, in any format (an FP8 flash kernel is not modelled).
    if (const std::optional<double> fused =
            fusedAttentionUs(hw, g.device_shape, g.direction, {*g.lhs().role, *g.rhs().role}))
      return GemmEstimate{*fused, *fused, 0.0};
    // With cast_once, the GEMM operands reading one tensor share its cast.
    auto share = [&](const OperandProfile& o) { return hw.cast_once ? 1.0 / std::max(1, readers.at(o.tensor)) : 1.0; };
    return estimateGemm(hw, g.device_shape, hw.high_precision, with.lhs, with.rhs, share(g.lhs()), share(g.rhs()));
  }
  // The value the thresholds compare: the ordering's score when one is given, else the
  // policy's metric of these formats.
  MetricValue metricValue(const GemmProfile& g, const Choice& with) const {
    if (scores) {
      auto it = scores->find(g.label);
      if (it == scores->end())
        throw Error(fmt::format("the ordering has no score for GEMM '{}' of profile {}", g.label, profile_path));
      return {it->second, false};
    }
    return metricOf(metricFor(g), g, with.lhs, with.rhs, with.sqnr_lhs, with.sqnr_rhs, profile_path);
  }
};

// Why a GEMM got its decision, as a value; reasonText() says it in words.
enum class Why {
  kRuleKeeps,      // a policy rule keeps it in high precision
  kRuleQuantizes,  // a policy rule quantizes it
  kDirectionOff,   // the policy does not quantize its direction
  kTooDeep,        // int8: K beyond what the CPU's int8 GEMM sums exactly (int8TooDeep)
  kNotFaster,      // int8: the roofline estimate is below min_speedup
  kPassed,         // int8: its metric passed the threshold
  kRefined,        // int8: it failed the threshold; quantized with the policy's low_sqnr scales
  kFailed,         // int8: it failed the threshold; kept
  kSchemePassed,   // the first of the policy's schemes that fits, pays off and passes
  kNoScheme,       // none of the policy's schemes did; kept
};

// Why one of the policy's schemes did not take a GEMM.
struct SchemeMiss {
  enum class Kind { kBlock, kAlignment, kTooDeep, kNotFaster, kFailed };
  Scheme scheme = Scheme::kInt8;
  Kind kind = Kind::kBlock;
  int block = 0;        // kBlock: the MX block that does not divide K
  double speedup = 0;   // kNotFaster: the roofline estimate
  Choice formats;       // kFailed: the scheme's formats, and
  MetricValue metric;   //   the value that failed the threshold
};

// The decision for one GEMM and everything its reason says.
struct Verdict {
  Why why = Why::kDirectionOff;
  Choice considered;      // the formats of the first scheme the hardware runs
  Choice formats;         // quantized: the formats that run
  GemmEstimate estimate;  // the roofline: of the scheme that passed, else of `considered`
  MetricValue metric;     // what the threshold compared (kPassed, kRefined, kFailed, kSchemePassed)
  const PolicyRule* rule = nullptr;  // kRuleKeeps, kRuleQuantizes
  Scheme scheme = Scheme::kInt8;     // kSchemePassed
  std::vector<SchemeMiss> misses;    // kSchemePassed (the schemes before it), kNoScheme

  bool quantizes() const {
    return why == Why::kRuleQuantizes || why == Why::kPassed || why == Why::kRefined || why == Why::kSchemePassed;
  }
};

Verdict byRule(const GemmProfile& g, const Context& ctx, const PolicyRule& rule, Verdict v) {
  v.rule = &rule;
  if (rule.action == Decision::kKeep) {
    v.why = Why::kRuleKeeps;
    return v;
  }
  v.why = Why::kRuleQuantizes;
  v.formats = v.considered;
  if (rule.lhs_format) {
    v.formats.lhs = *rule.lhs_format;
    v.formats.rhs = *rule.rhs_format;
    // Formats the generator did not fit to the hardware itself: each must be of a family
    // the hardware runs (NVFP4 is no Hopper format), and an int8 pair must run exactly
    // (an FP8, MX or bf16 pair runs emulated or as a bf16 GEMM, exactly).
    for (const QuantFormat& format : {v.formats.lhs, v.formats.rhs})
      if (!ctx.hw.runsFamily(formatFamily(format)))
        throw Error(fmt::format("policy {}, rule ({}): forces format {} ({}) on GEMM '{}', which hardware '{}' does "
                                "not run (it runs: {})",
                                ctx.policy.name, rule.describe(), format.toString(), formatFamily(format), g.label,
                                ctx.hw.name, fmt::join(ctx.hw.formats, ", ")));
    if (!v.formats.lhs.isEmulated() && !ctx.hw.runsExactly(v.formats.lhs.bits, v.formats.rhs.bits))
      throw Error(fmt::format("policy {}, rule ({}): forces {} x {} on GEMM '{}', which hardware '{}' cannot run "
                              "exactly ({}; a wider pair saturates silently): narrow one of the rule's formats",
                              ctx.policy.name, rule.describe(), v.formats.lhs.toString(), v.formats.rhs.toString(),
                              g.label, ctx.hw.name, ctx.hw.int8Limits()));
  }
  // What the scheme path checks before choosing a format (the rule's own or its
  // scheme's): a recipe whose MX block does not divide K, or whose FP8/MX/FP4 GEMM a GPU's
  // tensor cores cannot take, was written and then refused by pgq train.
  const int64_t k = g.device_shape.size() == 4 ? g.device_shape[2] : 0;
  if (const int block = blockMismatch(g, v.formats))
    throw Error(fmt::format("policy {}, rule ({}): quantizes GEMM '{}' in {} x {}, whose block of {} does not divide "
                            "its K = {}; give the rule formats that fit, or let the GEMM be kept",
                            ctx.policy.name, rule.describe(), g.label, v.formats.lhs.toString(),
                            v.formats.rhs.toString(), block, k));
  if (const int64_t deep = int8TooDeep(g, v.formats, ctx.hw))
    throw Error(fmt::format("policy {}, rule ({}): quantizes GEMM '{}' in {} x {}, whose K = {} is beyond the {} that "
                            "the CPU's int8 GEMM sums exactly in int32; let the GEMM be kept",
                            ctx.policy.name, rule.describe(), g.label, v.formats.lhs.toString(),
                            v.formats.rhs.toString(), deep, kCpuInt8MaxK));
  if (ctx.hw.high_precision != DType::kF32)
    if (const int64_t dim = alignmentMismatch(g, v.formats))
      throw Error(fmt::format("policy {}, rule ({}): quantizes GEMM '{}' in {} x {} on hardware '{}', whose tensor "
                              "cores need K and N multiples of 16, got {}; let the GEMM be kept",
                              ctx.policy.name, rule.describe(), g.label, v.formats.lhs.toString(),
                              v.formats.rhs.toString(), ctx.hw.name, dim));
  return v;
}

// Among the policy's schemes, the first that fits, pays off on the roofline and passes
// the threshold; otherwise high precision, with every scheme's reason.
Verdict byScheme(const GemmProfile& g, const Context& ctx, Verdict v) {
  const DirectionPolicy& dp = directionPolicy(ctx.policy, g);
  for (Scheme scheme : ctx.schemes) {
    SchemeMiss miss;
    miss.scheme = scheme;
    Choice c = ctx.choice(g, scheme);
    if (int block = blockMismatch(g, c)) {
      miss.kind = SchemeMiss::Kind::kBlock;
      miss.block = block;
      v.misses.push_back(miss);
      continue;
    }
    if (alignmentMismatch(g, c) != 0) {
      miss.kind = SchemeMiss::Kind::kAlignment;
      v.misses.push_back(miss);
      continue;
    }
    if (int8TooDeep(g, c, ctx.hw) != 0) {
      miss.kind = SchemeMiss::Kind::kTooDeep;
      v.misses.push_back(miss);
      continue;
    }
    GemmEstimate estimate = ctx.estimate(g, c);
    if (estimate.speedup() < ctx.policy.min_speedup) {
      miss.kind = SchemeMiss::Kind::kNotFaster;
      miss.speedup = estimate.speedup();
      v.misses.push_back(miss);
      continue;
    }
    MetricValue metric = ctx.metricValue(g, c);
    if (!dp.passes(metric.value)) {
      miss.kind = SchemeMiss::Kind::kFailed;
      miss.formats = c;
      miss.metric = metric;
      v.misses.push_back(miss);
      continue;
    }
    v.why = Why::kSchemePassed;
    v.scheme = scheme;
    v.formats = c;
    v.estimate = estimate;
    v.metric = metric;
    return v;
  }
  v.why = Why::kNoScheme;
  return v;
}

// The int8 path: the roofline, then the threshold on the policy's formats.
Verdict byThreshold(const GemmProfile& g, const Context& ctx, Verdict v) {
  const Policy& policy = ctx.policy;
  const DirectionPolicy& dp = directionPolicy(policy, g);
  if (int8TooDeep(g, v.considered, ctx.hw) != 0) {
    v.why = Why::kTooDeep;
    return v;
  }
  if (v.estimate.speedup() < policy.min_speedup) {
    v.why = Why::kNotFaster;
    return v;
  }
  v.metric = ctx.metricValue(g, v.considered);
  if (dp.passes(v.metric.value)) {
    v.why = Why::kPassed;
    v.formats = v.considered;
  } else if (policy.low_sqnr) {
    v.why = Why::kRefined;
    v.formats = chooseFormats(g, ctx.hw, policy, dp, *policy.low_sqnr);
  } else {
    v.why = Why::kFailed;
  }
  return v;
}

// The decision for `g`, in order: a matching policy rule, the direction, then the
// policy's schemes or the int8 path. Pure: reads the profile, the hardware and the
// policy, writes nothing (it throws for statistics the profile lacks).
Verdict decide(const GemmProfile& g, const Context& ctx) {
  Verdict v;
  v.considered = ctx.choice(g, ctx.schemes.empty() ? Scheme::kInt8 : ctx.schemes.front());
  v.estimate = ctx.estimate(g, v.considered);
  if (const PolicyRule* rule = matchingRule(ctx.policy, g)) return byRule(g, ctx, *rule, std::move(v));
  if (!directionPolicy(ctx.policy, g).quantize) {
    v.why = Why::kDirectionOff;
    return v;
  }
  return ctx.schemes.empty() ? byThreshold(g, ctx, std::move(v)) : byScheme(g, ctx, std::move(v));
}

// "min SQNR 31.2", or the metric or ordering score compared, with the min SQNR.
std::string metricText(const GemmProfile& g, const Context& ctx, const Choice& with, const MetricValue& v) {
  if (ctx.scores) return fmt::format("ordering score {} (min SQNR {})", sqnrText(v.value), sqnrText(with.minSqnr()));
  const Metric metric = ctx.metricFor(g);
  if (metric == Metric::kSqnr) return fmt::format("min SQNR {}", sqnrText(v.value));
  return fmt::format("{} {} (min SQNR {})", nameOf(metric), sqnrText(v.value), sqnrText(with.minSqnr()));
}

// "activation int8:channel:rtn 3.1e+04, weight int7:channel:rtn 2e+04"
std::string formatsText(const GemmProfile& g, const Choice& c) {
  return fmt::format("{} {} {}, {} {} {}", g.lhs().roleName(), c.lhs.toString(), sqnrText(c.sqnr_lhs),
                     g.rhs().roleName(), c.rhs.toString(), sqnrText(c.sqnr_rhs));
}

// The comparison a value failed: "<= 20" (">= 20" for an adversarial policy).
std::string failedText(const DirectionPolicy& dp) {
  return fmt::format("{} {}", dp.invert ? ">=" : "<=", sqnrText(dp.threshold));
}

// Why each scheme did not take the GEMM: "mxfp8: block 32 does not divide K = 48; ...".
std::string missesText(const GemmProfile& g, const Context& ctx, const std::vector<SchemeMiss>& misses) {
  const int64_t k = g.device_shape.size() == 4 ? g.device_shape[2] : 0;
  auto text = [&](const SchemeMiss& m) {
    switch (m.kind) {
      case SchemeMiss::Kind::kBlock: return fmt::format("{}: block {} does not divide K = {}", m.scheme, m.block, k);
      case SchemeMiss::Kind::kAlignment:
        return fmt::format("{}: K = {} and N = {} must be multiples of 16 for the tensor cores' {} GEMM", m.scheme, k,
                           g.device_shape[3], m.scheme);
      case SchemeMiss::Kind::kTooDeep:
        return fmt::format("{}: K = {} is beyond the {} that int8 sums exactly in int32", m.scheme, k, kCpuInt8MaxK);
      case SchemeMiss::Kind::kNotFaster:
        return fmt::format("{}: est. {:.2f}x < {:.2f}x", m.scheme, m.speedup, ctx.policy.min_speedup);
      case SchemeMiss::Kind::kFailed:
        return fmt::format("{}: {} {}", m.scheme, metricText(g, ctx, m.formats, m.metric),
                           failedText(directionPolicy(ctx.policy, g)));
    }
    return std::string();
  };
  std::vector<std::string> parts;
  for (const SchemeMiss& m : misses) parts.push_back(text(m));
  return fmt::format("{}", fmt::join(parts, "; "));
}

// The reason a person reads in the recipe: the direction, then what decided and with
// which numbers.
std::string reasonText(const GemmProfile& g, const Verdict& v, const Context& ctx) {
  const Policy& policy = ctx.policy;
  const DirectionPolicy& dp = directionPolicy(policy, g);
  const double t = dp.threshold;
  const Choice& c = v.considered;
  const std::string estimated = c.estimated || v.metric.estimated ? " (SQNR estimated from another format)" : "";
  switch (v.why) {
    case Why::kRuleKeeps:
      return fmt::format("{}, policy rule ({}): {}", g.direction, v.rule->describe(), ctx.kept);
    case Why::kRuleQuantizes:
      // The formats that run, the rule's or the policy's first scheme's (it said "int8" for
      // a scheme policy's mxfp8).
      return fmt::format("{}, policy rule ({}): {} x {}{}", g.direction, v.rule->describe(), v.formats.lhs.toString(),
                         v.formats.rhs.toString(),
                         v.rule->smooth > 0 ? fmt::format(" with SmoothQuant alpha {}", v.rule->smooth) : "");
    case Why::kDirectionOff:
      return fmt::format("{}, policy {} does not quantize {} GEMMs: {}", g.direction, policy.name,
                         isBackward(g.direction) ? "backward" : "forward", ctx.kept);
    case Why::kTooDeep:
      return fmt::format("{}, K = {} is beyond the {} that int8 sums exactly in int32: {}", g.direction,
                         g.device_shape[2], kCpuInt8MaxK, ctx.kept);
    case Why::kNotFaster:
      return fmt::format("{}, intensity {:.0f} flop/B, est. int8 {:.2f}x (< {:.2f}x) with quantization traffic: not "
                         "worth it, {}",
                         g.direction, g.intensity(), v.estimate.speedup(), policy.min_speedup, ctx.kept);
    case Why::kPassed: {
      std::string why = t <= 0 ? metricText(g, ctx, c, v.metric)
                               : fmt::format("{} {} {}{}", metricText(g, ctx, c, v.metric), dp.invert ? "<" : ">",
                                             sqnrText(t), dp.invert ? " (adversarial)" : "");
      return fmt::format("{}, {}{}, est. {:.2f}x: int8 ({})", g.direction, why, estimated, v.estimate.speedup(),
                         formatsText(g, c));
    }
    case Why::kRefined:
      return fmt::format("{}, {} {} at {} scales: int8 with {} scales instead{}", g.direction,
                         metricText(g, ctx, c, v.metric), failedText(dp), policy.granularity.text(),
                         policy.low_sqnr->text(), v.formats.estimated ? " (their SQNR not profiled)" : "");
    case Why::kFailed:
      return fmt::format("{}, {} {}{}: {} ({})", g.direction, metricText(g, ctx, c, v.metric), failedText(dp),
                         estimated, ctx.kept, formatsText(g, c));
    case Why::kSchemePassed:
      // Marked as the int8 branches are: a metric estimated from other statistics (an
      // output error measured without the Hadamard transform) was quoted as measured.
      return fmt::format("{}, {}{}{}, est. {:.2f}x on {}: {} ({}){}", g.direction,
                         metricText(g, ctx, v.formats, v.metric),
                         t > 0 ? fmt::format(" {} {}", dp.invert ? "<" : ">", sqnrText(t)) : "",
                         v.formats.estimated || v.metric.estimated ? " (estimated from other statistics)" : "",
                         v.estimate.speedup(), ctx.hw.name, v.scheme, formatsText(g, v.formats),
                         v.misses.empty() ? "" : fmt::format("; not {}", missesText(g, ctx, v.misses)));
    case Why::kNoScheme:
      return fmt::format("{}, {}: {}", g.direction, ctx.kept, missesText(g, ctx, v.misses));
  }
  return "";
}

// The recipe entry of `g`: the decision's formats and scaling, and its reason in words.
RecipeEntry entryOf(const GemmProfile& g, const Verdict& v, const Context& ctx) {
  const Policy& policy = ctx.policy;
  RecipeEntry e;
  e.label = g.label;
  e.reason = reasonText(g, v, ctx);
  e.min_sqnr = v.quantizes() ? v.formats.minSqnr() : v.considered.minSqnr();
  e.est_speedup = v.estimate.speedup();
  e.estimate = v.estimate;
  e.metric_value = v.metric.value;
  e.gemm_shape = g.gemm_shape;
  e.device_shape = g.device_shape;
  e.devices = g.devices;
  e.sharding = g.sharding;
  const OperandRole lhs_role = g.lhs().role.value_or(OperandRole::kActivation);
  const OperandRole rhs_role = g.rhs().role.value_or(OperandRole::kActivation);
  e.gemm = EntryGemm{g.direction, {lhs_role, rhs_role}, g.grad_of};
  if (!v.quantizes()) return e;
  e.decision = Decision::kQuantize;
  const QuantFormat& lf = e.lhs_format = v.formats.lhs;
  const QuantFormat& rf = e.rhs_format = v.formats.rhs;
  if (v.rule) e.smooth = v.rule->smooth;
  auto per_tensor_fp8 = [](const QuantFormat& f) { return f.isEmulated() && f.granularity == Granularity::kPerTensor; };
  if (policy.amax_history > 0 && per_tensor_fp8(lf) && rf.granularity == Granularity::kPerTensor) {
    e.amax_history = policy.amax_history;
    e.amax_compute = policy.amax_compute;
  }
  const bool weight_per_tensor =
      (lhs_role == OperandRole::kWeight && per_tensor_fp8(lf)) || (rhs_role == OperandRole::kWeight && per_tensor_fp8(rf));
  e.predict_weight_scale = policy.predict_weight_scales && weight_per_tensor;
  return e;
}

// The policy's schemes the hardware runs natively; notes for those it does not. Throws
// when it runs none.
std::vector<Scheme> schemesHere(const Policy& policy, const HardwareModel& hw, std::vector<std::string>& notes) {
  std::vector<Scheme> here;
  for (Scheme scheme : policy.formats) {
    FormatFamily family = familyOf(scheme);
    // Asked for 4 bits, a user wants to hear that this hardware has none, not to get an
    // 8-bit recipe in its place.
    if (isFourBit(scheme) && !hw.runsFamily(family))
      throw Error(fmt::format("policy {}: field 'formats' lists {}, which hardware '{}' does not run (it runs: {}; "
                              "{} needs FP4 tensor cores: b200, gb300{})",
                              policy.source, scheme, hw.name, fmt::join(hw.formats, ", "), scheme,
                              family == FormatFamily::kMxfp4 ? ", mi355x" : ""));
    if (hw.runsFamily(family))
      here.push_back(scheme);
    else
      notes.push_back(fmt::format("policy {} lists {} ({}), which hardware {} does not run natively (it runs: {}): "
                                  "skipped",
                                  policy.name, scheme, family, hw.name, fmt::join(hw.formats, ", ")));
  }
  if (here.empty())
    throw Error(fmt::format("policy {}: field 'formats' asks for {}, none of which hardware '{}' runs natively (it "
                            "runs: {}); choose another --hardware or another policy",
                            policy.name, fmt::join(policy.formats, ", "), hw.name, fmt::join(hw.formats, ", ")));
  return here;
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
  // The profiled step was measured on the CPU that profiled; its non-GEMM time says
  // nothing about a GPU target or another CPU (a 96-core Zen 4 model was given the 2-core
  // Zen 3's 465 ms outside GEMMs and estimated 1.00x), whose estimate is then GEMM time
  // only. A CPU model is taken for the profiled one when its threads and VNNI agree.
  const bool gpu = hw.high_precision != DType::kF32;
  const bool same_cpu = !gpu && profile.run.threads == hw.threads && profile.run.vnni == hw.vnni;
  sum.measured_step_ms = same_cpu ? profile.run.step_ms : 0.0;
  Context ctx{hw, policy, profile_path, scores, {}, policy.metric.value_or(defaultMetric(profile)), {},
              fmt::format("kept {}", dtypeName(hw.high_precision))};
  const bool thresholds = policy.forward.threshold > 0 || policy.backward.threshold > 0 || policy.forward.invert ||
                          policy.backward.invert;
  if (!policy.metric && !scores && thresholds)
    recipe.notes.push_back(
        ctx.backward_metric == kDefaultMetric
            ? fmt::format("backward thresholds compare the default metric, {}, forward ones min SQNR "
                          "(docs/METRICS.md; --metric sqnr for the paper's)",
                          nameOf(ctx.backward_metric))
            : fmt::format("thresholds compare min SQNR: the default metric, {}, needs a profile made with pgq train "
                          "--profile-metrics --profile-outputs",
                          nameOf(kDefaultMetric)));
  for (const GemmProfile& g : profile.gemms)
    for (size_t i = 0; i < 2; ++i) ctx.readers[g.operands[i].tensor] += 1;
  // Schemes the hardware does not run natively are skipped (and said so); a policy none
  // of whose schemes runs there is a mistake, not a set of GEMM decisions.
  std::vector<Scheme> schemes = schemesHere(policy, hw, recipe.notes);
  if (policy.formats != std::vector<Scheme>{Scheme::kInt8}) ctx.schemes = std::move(schemes);

  for (const GemmProfile& g : profile.gemms) {
    const Verdict v = decide(g, ctx);
    RecipeEntry e = entryOf(g, v, ctx);
    const bool forward = !isBackward(g.direction), int8 = e.decision == Decision::kQuantize;
    (forward ? sum.fwd_total : sum.bwd_total) += 1;
    if (int8) (forward ? sum.fwd_quantized : sum.bwd_quantized) += 1;
    sum.est_gemm_ms += v.estimate.high_precision_us / 1e3;
    sum.est_gemm_quantized_ms += (int8 ? v.estimate.int8Us() : v.estimate.high_precision_us) / 1e3;
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

namespace {

// Every GEMM's roofline estimate, as the decisions used it: microseconds in high
// precision, of the quantized GEMM alone and of quantizing (casting) its operands.
std::string perGemmEstimates(const Recipe& r) {
  std::string out = fmt::format("  per-GEMM estimates on {} (us; M,K,N per device; quantized: the GEMM alone + its "
                                "operands' casts):\n    {:<34} {:>20} {:>9} {:>11} {:>9} {:>8}  {}\n",
                                r.hardware, "GEMM", "shape", "high", "quantized", "casts", "speedup", "decision");
  for (const RecipeEntry& e : r.entries) {
    if (e.device_shape.empty()) continue;
    const GemmEstimate& t = e.estimate;
    out += fmt::format("    {:<34} {:>20} {:>9.1f} {:>11.1f} {:>9.1f} {:>7.2f}x  {}\n", e.label,
                       gemmShapeText(e.device_shape), t.high_precision_us, t.int8_gemm_us, t.quantization_us,
                       t.speedup(),
                       e.decision == Decision::kKeep ? std::string("keep")
                                                     : std::string(nameOf(formatFamily(e.lhs_format))));
  }
  return out;
}

// What kept a GEMM, by the first words of its reason; a scheme list gives one reason
// per scheme ("int8: ...; bf16: ..."), each named with its scheme where they differ.
std::string keptCategory(const std::string& reason) {
  const std::pair<const char*, const char*> kMarkers[] = {{"does not divide", "MX block does not divide K"},
                                                          {"multiples of 16", "K or N not a multiple of 16"},
                                                          {"sums exactly in int32", "K too deep for exact int8 sums"},
                                                          {"min SQNR", "failed the threshold"},
                                                          {"not worth it", "roofline: not faster quantized"},
                                                          {"x < ", "roofline: not faster quantized"},
                                                          {"policy rule", "a policy rule"}};
  // The category of one scheme's reason, and the scheme it names before it (or "").
  auto category = [&](std::string_view part) -> std::pair<std::string, std::string> {
    std::string why = "direction not quantized by the policy";
    size_t first = std::string_view::npos;
    for (const auto& [marker, text] : kMarkers)
      if (size_t at = part.find(marker); at < first) {
        first = at;
        why = text;
      }
    const size_t colon = first == std::string_view::npos ? first : part.rfind(": ", first);
    if (colon == std::string_view::npos) return {why, ""};
    const size_t space = part.find_last_of(" ,", colon);
    const size_t from = space == std::string_view::npos ? 0 : space + 1;
    return {why, std::string(part.substr(from, colon - from))};
  };
  std::vector<std::pair<std::string, std::string>> each;
  for (size_t start = 0; start <= reason.size();) {
    const size_t end = std::min(reason.find("; ", start), reason.size());
    each.push_back(category(std::string_view(reason).substr(start, end - start)));
    start = end + 2;
  }
  std::string why = each.front().first;
  if (std::none_of(each.begin(), each.end(), [&](const auto& c) { return c.first != why; })) return why;
  why.clear();
  for (const auto& [text, scheme] : each)
    why += fmt::format("{}{}{}", why.empty() ? "" : "; ", scheme.empty() ? "" : scheme + ": ", text);
  return why;
}

}  // namespace

std::string explainRecipe(const Recipe& r) {
  const RecipeSummary& s = r.summary;
  std::string out = fmt::format("recipe {} for model {} on {} (profile {})\n", r.name, r.model, r.hardware, r.profile);
  // Quantized GEMMs by format family ("int8", "fp8", ...).
  std::map<std::string, int> families;
  bool emulated = false;
  for (const RecipeEntry& e : r.entries)
    if (e.decision == Decision::kQuantize) {
      families[std::string(nameOf(formatFamily(e.lhs_format)))] += 1;
      emulated = emulated || (e.lhs_format.isEmulated() && e.lhs_format.element != Element::kBf16);
    }
  std::string in = families.size() == 1 ? fmt::format("in {}", families.begin()->first) : "quantized";
  out += fmt::format("  forward GEMMs:  {:>3} of {:>3} {}\n", s.fwd_quantized, s.fwd_total, in);
  out += fmt::format("  backward GEMMs: {:>3} of {:>3} {}\n", s.bwd_quantized, s.bwd_total, in);
  if (families.size() > 1)
    for (const auto& [family, n] : families) out += fmt::format("    {:<8} {:>3} GEMMs\n", family, n);
  for (const std::string& note : r.notes) out += fmt::format("  note: {}\n", note);
  if (emulated)
    out += fmt::format("  FP8/MX/FP4 GEMMs are emulated on CPUs (quantize -> dequantize -> f32 GEMM: the format's "
                       "numerics at f32 speed); the estimates below are hardware {}'s\n",
                       r.hardware);
  // Why GEMMs were kept, grouped by keptCategory() of their reason.
  std::map<std::string, int> kept;
  for (const RecipeEntry& e : r.entries)
    if (e.decision == Decision::kKeep) kept[keptCategory(e.reason)] += 1;
  for (const auto& [why, n] : kept) out += fmt::format("  kept in high precision: {:>3} ({})\n", n, why);
  std::vector<const RecipeEntry*> lowest;
  for (const RecipeEntry& e : r.entries)
    if (e.min_sqnr >= 0) lowest.push_back(&e);  // 0 is the worst SQNR, not a missing one
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
                                                              : std::string(nameOf(formatFamily(lowest[i]->lhs_format))));
    if (parallel)
      out += fmt::format("  {} / {}", gemmShapeText(lowest[i]->gemm_shape), gemmShapeText(lowest[i]->device_shape));
    out += "\n";
  }
  out += perGemmEstimates(r);
  out += fmt::format("  estimated GEMM time on {}: {:.1f} ms -> {:.1f} ms ({:.2f}x)\n", r.hardware, s.est_gemm_ms, s.est_gemm_quantized_ms,
                     s.est_gemm_ms / std::max(s.est_gemm_quantized_ms, 1e-9));
  if (s.measured_step_ms > 0)
    out += fmt::format("  estimated step time: {:.1f} ms -> {:.1f} ms ({:.2f}x; non-GEMM time from the profiled run)\n",
                       s.measured_step_ms, s.measured_step_ms / s.estimatedStepSpeedup(), s.estimatedStepSpeedup());
  return out;
}

}  // namespace pgq
