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

#include "kernels/gemm_shape.h"

namespace pgq::kernels {

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

  // Throws KernelError naming the bad field and what was expected.
  void validate() const;
  std::string toString() const;
  // Throws KernelError on malformed text or an invalid format.
  static QuantFormat parse(std::string_view text);

  // Equal when the text forms are equal (fields a format ignores do not count).
  bool operator==(const QuantFormat& other) const;
};

// Common formats.
QuantFormat perChannelFormat(int bits, Rounding rounding = Rounding::kNearest);
QuantFormat perTensorFormat(int bits, Rounding rounding = Rounding::kNearest);
QuantFormat perBlockFormat(int bits, int block, Rounding rounding = Rounding::kNearest);

// The integer grid a format rounds onto, independent of the storage side:
// symmetric [-(2^(bits-1)-1), 2^(bits-1)-1] (zero exactly representable, no zero point),
// asymmetric [0, 2^bits - 1] with a per-group integer zero point in that range.
struct QuantGrid {
  int lo = 0;
  int hi = 0;
};
QuantGrid gridOf(const QuantFormat& format);

// How quantized values are stored: the lhs of a GEMM as u8, the rhs as s8.
enum class StorageType { kU8, kS8 };
StorageType storageOf(const QuantFormat& format, GemmSide side);
// Added to a grid integer to get the stored byte: 2^(bits-1) for a symmetric lhs (so
// oneDNN removes it as a constant source zero point), -2^(bits-1) for an asymmetric rhs
// (so the unsigned grid fits s8), 0 otherwise.
int storageOffset(const QuantFormat& format, GemmSide side);

// Parameter buffers. A format has quantGroupCount() groups, each with one scale. The
// caller-owned params buffer holds quantParamCount() floats:
//   params[0, G)    scales (dequantized value = scale * (grid integer - zero point))
//   params[G, 2G)   zero points, asymmetric formats only: integers in [0, 2^bits-1]
//                   stored as float (exact), in the grid domain, not the storage domain.
// Group index g: per-tensor 0; per-channel b*channels + c; per-block
// (b*channels + c)*blocks + j, where c is the channel (row of A [M,K], column of B
// [K,N]) and j the block along the contracting dimension.
int64_t blockCount(const OperandView& view, const QuantFormat& format);
int64_t quantGroupCount(const OperandView& view, const QuantFormat& format);
int64_t quantParamCount(const OperandView& view, const QuantFormat& format);

const char* granularityName(Granularity granularity);
const char* roundingName(Rounding rounding);

}  // namespace pgq::kernels
