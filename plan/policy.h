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
#include <string_view>
#include <vector>

#include "ir/gemm_meta.h"
#include "plan/gemm_metric.h"
#include "support/label_pattern.h"
#include "support/quant_scheme.h"

namespace pgq {

struct DirectionPolicy {
  bool quantize = false;
  // Quantize only GEMMs whose metric (the policy's; the lower input SQNR unless said
  // otherwise) is above `threshold` (or below it when `invert`, the adversarial
  // ordering). 0 without invert means always.
  double threshold = 0;
  bool invert = false;
  Rounding rounding = Rounding::kNearest;           // weights and activations (rtn | sr in files)
  Rounding gradient_rounding = Rounding::kNearest;  // gradient operands

  // Whether a GEMM whose metric is `value` passes the threshold.
  bool passes(double value) const { return invert ? value < threshold : (threshold <= 0 || value > threshold); }
};

// A rule forces a decision for the GEMMs it matches; the first matching rule wins.
struct PolicyRule {
  LabelPattern label;                        // matches the whole label; empty matches all
  std::optional<DirectionFilter> direction;  // fwd | bwd_dgrad | bwd_wgrad | bwd; absent matches all
  std::optional<OperandRole> role;           // a GEMM with an operand of this role; absent matches all
  int64_t layer_min = -1;                    // inclusive layer range; -1 / -1 matches all
  int64_t layer_max = -1;
  Decision action = Decision::kKeep;         // `quantize` (int8) | `keep` in files
  // quantize: formats to use instead of the policy's (both or neither).
  std::optional<QuantFormat> lhs_format;
  std::optional<QuantFormat> rhs_format;
  double smooth = 0;        // quantize: SmoothQuant alpha (0: off)

  std::string describe() const;
};

// The scales of a policy's int8 formats, as `granularity:` and `low_sqnr:` write them
// ("channel", "block64"). Held as the round-to-nearest int8 format they make; a GEMM's
// bits and roundings are set by withBits().
struct ScaleLayout {
  QuantFormat format = perChannelFormat(8);

  // The layout `<granularity>[:<refinement>...]` ("block64", "channel:clip=mse") of the
  // format `int8:<granularity>:rtn[:<refinement>...]`. Throws pgq::Error (the format
  // parser's message) for text that makes no valid format.
  static ScaleLayout parse(std::string_view text);
  // The format's granularity and refinements: "block64", "channel:asym".
  std::string text() const;
  QuantFormat withBits(int bits, Rounding rounding) const;
};

struct Policy {
  std::string name;
  std::string source;  // the file it was read from, or "<standard policy NAME>", for messages
  DirectionPolicy forward;
  DirectionPolicy backward;
  int bits = 8;
  ScaleLayout granularity;     // tensor | channel | block<N>
  double min_speedup = 1.05;   // roofline: int8 must be estimated this much faster
  // For a GEMM that fails its SQNR threshold: keep it in high precision (none; `keep` in
  // files), or quantize it with finer scales (e.g. "block64") instead.
  std::optional<ScaleLayout> low_sqnr;
  std::vector<PolicyRule> rules;
  // Candidate format schemes (support/quant_scheme.h) in order of preference: a GEMM
  // takes the first one the hardware runs natively that passes the roofline and the
  // SQNR threshold (default: int8).
  std::vector<Scheme> formats = {Scheme::kInt8};
  // Delayed scaling for per-tensor FP8 schemes (0: just in time).
  int64_t amax_history = 0;
  std::string amax_compute = "max";
  // Weights of per-tensor FP8 schemes take MOSS's predicted scales instead.
  bool predict_weight_scales = false;
  // The directions whose 4-bit (nvfp4, mxfp4) GEMMs take the random Hadamard transform
  // on both operands (`hadamard: bwd_wgrad` in files, as NVIDIA's NVFP4 recipe); unset:
  // none.
  std::optional<DirectionFilter> hadamard;
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
