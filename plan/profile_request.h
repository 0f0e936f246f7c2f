#pragma once
// Stage (i)'s request: which formats the statistics nodes measure every GEMM operand in
// (passes/instrument_stats.h), decided from what the user asks for (`pgq train
// --profile-bits/--profile-granularity/--profile-formats/--profile-outputs/
// --profile-metrics`) and from the CPU the profile runs on. Typed values throughout:
// the flags are parsed once, by parseProfileCandidate() and ScaleLayout::parse().
#include <string_view>
#include <variant>
#include <vector>

#include "plan/hardware.h"
#include "plan/policy.h"
#include "support/quant_format.h"
#include "support/quant_scheme.h"

namespace pgq {

// The formats a GEMM's operands take: `gradient` for an operand that is a gradient,
// `operand` for the others.
struct FormatPair {
  QuantFormat operand;
  QuantFormat gradient;
  bool operator==(const FormatPair&) const = default;
};

// One item of --profile-formats: a scheme (fp8, mxfp8, ...: its operand format with
// round to nearest, its gradient format with both roundings) or a single format.
using ProfileCandidate = std::variant<Scheme, QuantFormat>;

// A scheme's name, else a format's text. Throws pgq::Error saying it is neither (with
// the format parser's reason).
ProfileCandidate parseProfileCandidate(std::string_view text);

// What the user asks stage (i) to profile besides int8 per channel (always measured).
struct ProfileAsk {
  int bits = 8;                                // integer formats of these bits ...
  ScaleLayout granularity;                     // ... and these scales
  std::vector<ProfileCandidate> candidates;    // FP8/MX schemes and single formats
  bool outputs = false;                        // also each GEMM's result
  bool metrics = false;                        // the statistics of the metrics beyond SQNR
};

// What the statistics nodes measure.
struct ProfileRequest {
  std::vector<QuantFormat> formats;           // every GEMM operand
  std::vector<QuantFormat> gradient_formats;  // gradient operands, besides `formats`
  bool outputs = false;                       // also each GEMM's result
  // The statistics of the metrics beyond SQNR: bias-aware SQNRs, and the output error
  // of every GEMM quantized in each of `output_pairs`.
  bool metrics = false;
  std::vector<FormatPair> output_pairs = {};
};

// The request for `ask` on `cpu` (its max_bits_one / max_bits_both: the integer widths
// its int8 GEMM runs exactly). Formats: int8 per channel and the asked bits and scales,
// each at the width one operand may have on this CPU and, where narrower, the width
// both may have (without VNNI a 7-bit variant), round to nearest for every operand and
// stochastic rounding for gradients; each asked scheme's operand and weight formats
// (round to nearest) and gradient format (both roundings), for 4-bit schemes also with
// the random Hadamard transform; each asked single format. With
// `metrics`, the output errors' pairs (operand, gradient): the asked and the int8 per
// channel integer formats at the width both operands may have (the pair must run
// exactly on this CPU), (rtn, rtn) and (rtn, sr); each scheme's operand format with its
// gradient format in either rounding. Lists keep the order of first appearance.
ProfileRequest profileRequest(const ProfileAsk& ask, const HardwareModel& cpu);

}  // namespace pgq
