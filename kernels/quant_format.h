#pragma once
// The kernels' side of a quantization format (support/quant_format.h): the integer grid,
// how quantized values are stored, and the sizes of the parameter buffers.
#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/gemm_shape.h"
#include "support/quant_format.h"

namespace pgq::kernels {

using pgq::Clipping;
using pgq::Granularity;
using pgq::QuantFormat;
using pgq::Rounding;
using pgq::granularityName;
using pgq::perBlockFormat;
using pgq::perChannelFormat;
using pgq::perTensorFormat;

// format.validate(), with a KernelError (the kernels' one exception) for a bad format.
void checkFormat(const QuantFormat& format);

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


}  // namespace pgq::kernels
