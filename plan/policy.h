#pragma once
// What recipe generation (stage ii) does: which directions to quantize, the SQNR
// threshold of each, the rounding of each operand, the roofline margin, what to do
// with GEMMs whose SQNR is too low, and rules that force GEMMs in or out.
//
// Standard policies by name (the paper's Table I), T a number:
//   F            forward GEMMs only
//   F+B          forward and backward, round to nearest everywhere
//   F+B_SR       forward and backward, stochastic rounding for gradient operands
//   F+B_SR>T     as F+B_SR, backward GEMMs only when their lower input SQNR is > T
//   F+B_SR<T     the adversarial twin: backward GEMMs only when it is < T
//   F+B>T, F+B<T the same with round-to-nearest gradients
//   F>T1+B_SR>T2 separate forward and backward thresholds
// or a YAML file (see recipes/policies/*.yaml for examples).
#include <optional>
#include <string>
#include <vector>

#include "ir/gemm_meta.h"
#include "plan/gemm_metric.h"
#include "support/label_pattern.h"

namespace pgq {

struct DirectionPolicy {
  bool quantize = false;
  // Quantize only GEMMs whose metric (the policy's; the lower input SQNR unless said
  // otherwise) is above `threshold` (or below it when `invert`, the adversarial
  // ordering). 0 without invert means always.
  double threshold = 0;
  bool invert = false;
  std::string rounding = "rtn";           // weights and activations
  std::string gradient_rounding = "rtn";  // gradient operands
};

// A rule forces a decision for the GEMMs it matches; the first matching rule wins.
struct PolicyRule {
  LabelPattern label;                        // matches the whole label; empty matches all
  std::optional<DirectionFilter> direction;  // fwd | bwd_dgrad | bwd_wgrad | bwd; absent matches all
  std::optional<OperandRole> role;           // a GEMM with an operand of this role; absent matches all
  int64_t layer_min = -1;                    // inclusive layer range; -1 / -1 matches all
  int64_t layer_max = -1;
  Decision action = Decision::kKeep;         // `quantize` (int8) | `keep` in files
  std::string lhs_format;   // quantize: formats to use instead of the policy's
  std::string rhs_format;
  double smooth = 0;        // quantize: SmoothQuant alpha (0: off)

  std::string describe() const;
};

// A format scheme: what a recipe quantizes a GEMM's operands to, by role, as the
// training libraries name them:
//   int8      the policy's bits and granularity (integer grid, f32 scales)
//   fp8       per-tensor e4m3 for weights and activations, e5m2 for gradients
//             (Transformer Engine's HYBRID format)
//   fp8_e4m3  per-tensor e4m3 for every operand (TE's E4M3 format)
//   mxfp8     OCP MXFP8 E4M3, blocks of 32 with E8M0 scales, every operand (TE's
//             MXFP8BlockScaling default)
//   mxint8    OCP MXINT8, blocks of 32 with E8M0 scales
//   moss_fp8  MOSS two-level scales over blocks of 32: e4m3, e5m2 for gradients
inline constexpr std::string_view kFormatSchemes[] = {"int8", "fp8", "fp8_e4m3", "mxfp8", "mxint8", "moss_fp8"};
struct SchemeFormats {
  std::string operand;   // weights and activations
  std::string gradient;  // gradient operands
};
// Formats of an FP8/MX scheme (not int8) with the given roundings ("rtn" | "sr").
SchemeFormats schemeFormats(std::string_view scheme, const std::string& rounding,
                            const std::string& gradient_rounding);
// The format family a scheme's GEMMs run in (int8, fp8, mxfp8, ...: what hardware
// models list as `formats`).
std::string schemeFamily(std::string_view scheme);

struct Policy {
  std::string name;
  DirectionPolicy forward;
  DirectionPolicy backward;
  int bits = 8;
  std::string granularity = "channel";  // tensor | channel | block<N>
  double min_speedup = 1.05;            // roofline: int8 must be estimated this much faster
  // For a GEMM that fails its SQNR threshold: keep it in high precision, or quantize it
  // with a refined format (e.g. "block64", "channel:clip=mse") instead.
  std::string low_sqnr = "keep";
  std::vector<PolicyRule> rules;
  // Candidate schemes in order of preference: a GEMM takes the first one the hardware
  // runs natively that passes the roofline and the SQNR threshold (default: int8).
  std::vector<std::string> formats = {"int8"};
  // Delayed scaling for per-tensor FP8 schemes (0: just in time).
  int64_t amax_history = 0;
  std::string amax_compute = "max";
  // Weights of per-tensor FP8 schemes take MOSS's predicted scales instead.
  bool predict_weight_scales = false;
  // What the thresholds compare against (plan/gemm_metric.h; `metric:` in files,
  // `pgq recipe --metric`); unset: defaultMetric() of the profile (effect when the
  // profile has its statistics, else SQNR).
  std::optional<Metric> metric;
};

// A standard policy name, or a policy YAML file. Throws pgq::Error naming the file
// and field, or listing the standard names.
Policy loadPolicy(const std::string& spec);
Policy parsePolicy(const std::string& yaml_text, const std::string& source);
std::optional<Policy> standardPolicy(const std::string& name);

}  // namespace pgq
