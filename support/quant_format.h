#pragma once
// How a GEMM operand is quantized: bits, scale granularity, rounding, zero point and
// clipping. The IR, profiles and recipes store a format as its text form
// (`int8:channel:rtn`, `int7:channel:sr`, `int8:block64:rtn:clip=mse`), so that form is
// part of the file formats: toString() and parse() round-trip and stay stable.
//
// Text grammar:  int<bits>:<granularity>:<rounding>[:asym][:clip=mse|clip=p<percent>]
//   bits         2..8
//   granularity  tensor | channel | block<N>   (N = block length along the contracting dim)
//   rounding     rtn (round to nearest, ties to even) | sr (stochastic rounding)
//   asym         asymmetric grid with a zero point (default: symmetric, no zero point)
//   clip=p99.9   clip at the 99.9th percentile of |x| (of x per tail when asymmetric)
//   clip=mse     clip at the ratio of the range that minimizes the quantization MSE
// toString() writes the optional fields in that order; parse() accepts them in any
// order but each at most once.
#include <cstdint>
#include <string>
#include <string_view>

namespace pgq {

enum class Granularity { kPerTensor, kPerChannel, kPerBlock };
enum class Rounding { kNearest, kStochastic };
enum class Clipping { kNone, kPercentile, kMse };

struct QuantFormat {
  int bits = 8;
  // One scale for the whole tensor, one per channel (non-contracting index, per batch),
  // or one per block of `block` elements of a channel along the contracting dimension.
  Granularity granularity = Granularity::kPerChannel;
  // Block length for kPerBlock (>= 1; the last block of a channel may be shorter);
  // must be 0 otherwise.
  int block = 0;
  Rounding rounding = Rounding::kNearest;
  bool asymmetric = false;
  Clipping clipping = Clipping::kNone;
  // For kPercentile: in (0, 100]; 100 means no clipping. Ignored otherwise.
  double percentile = 100.0;

  // Throws pgq::Error naming the bad field and what was expected.
  void validate() const;
  std::string toString() const;
  // Throws pgq::Error on malformed text or an invalid format.
  static QuantFormat parse(std::string_view text);

  // Equal when the text forms are equal (fields a format ignores do not count).
  bool operator==(const QuantFormat& other) const;
};

// Common formats.
QuantFormat perChannelFormat(int bits, Rounding rounding = Rounding::kNearest);
QuantFormat perTensorFormat(int bits, Rounding rounding = Rounding::kNearest);
QuantFormat perBlockFormat(int bits, int block, Rounding rounding = Rounding::kNearest);

// Scale groups of `format` for an operand of `batch` matrices of `channels`
// (non-contracting) by `contract` (contracting) elements: 1 per tensor, one per channel,
// or one per block of a channel. quantParamCount() adds the zero points of asymmetric
// formats (one float per group).
// Blocks along a channel of `contract` elements: 1 unless per-block (the last block may
// be shorter).
int64_t quantBlockCount(const QuantFormat& format, int64_t contract);
int64_t quantGroupCount(const QuantFormat& format, int64_t batch, int64_t channels, int64_t contract);
int64_t quantParamCount(const QuantFormat& format, int64_t batch, int64_t channels, int64_t contract);

const char* granularityName(Granularity granularity);
const char* roundingName(Rounding rounding);

}  // namespace pgq
