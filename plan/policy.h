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
#include "support/label_pattern.h"

namespace pgq {

struct DirectionPolicy {
  bool quantize = false;
  // Quantize only GEMMs whose lower input SQNR (ratio) is above `threshold` (or below it
  // when `invert`, the adversarial ordering). 0 without invert means always.
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
};

// A standard policy name, or a policy YAML file. Throws pgq::Error naming the file
// and field, or listing the standard names.
Policy loadPolicy(const std::string& spec);
Policy parsePolicy(const std::string& yaml_text, const std::string& source);
std::optional<Policy> standardPolicy(const std::string& name);

}  // namespace pgq
