#pragma once
// GEMMs through oneDNN: f32, bf16 (f32 accumulation) and int8 with int32 accumulation
// and rescale to f32.
//   C = op(A) x op(B)   // [batch,M,K] x [batch,K,N] -> [batch,M,N]
// Transposed operands are described by strides (no copies). oneDNN primitives are
// created once per shape and cached (thread-safe); one global CPU engine.
//
// int8Gemm is step 3 of a quantized GEMM (quantize.h has steps 1 and 2): A is stored
// as u8 and B as s8 (quant_format.h: storageOf), each with the params its quantize()
// used. Per output element it computes
//   C[m,n] = sum over K segments of  sa[m] * sb[n] * sum_k (qa[m,k] - za[m]) (qb[k,n] - zb[n])
// where za/zb are the storage zero points (the symmetric lhs offset 2^(bits-1), or the
// asymmetric zero point) and the segments are the scale blocks of per-block formats
// (one segment otherwise). Costs on top of oneDNN's s32 GEMM:
// - the rescale pass over C (s32 -> f32 with row x column scales; oneDNN 2.6 has no
//   per-row output scale on this CPU);
// - a constant lhs zero point (every symmetric lhs, asymmetric per-tensor) is oneDNN's
//   runtime source zero point (~1-3%); per-row lhs zero points and any rhs zero point
//   are removed on the s32 result with row/column sums of the int8 operands, O(K(M+N))
//   extra reads and two integer multiply-adds per output;
// - per-block formats run one oneDNN GEMM per K segment into an s32 scratch and
//   accumulate in f32: slower (smaller GEMMs, one rescale pass per segment) but exact
//   per segment.
//
// Exactness (cpu_isa.h): int8Gemm throws KernelError for a pair of formats that could
// saturate on this CPU (8 x 8 bits without VNNI); exactGemmFormats() makes a pair that
// runs exactly. K is limited so that the int32 sums cannot overflow.
#include <cstdint>
#include <span>

#include "kernels/cpu_isa.h"
#include "kernels/gemm_shape.h"
#include "kernels/quant_format.h"

namespace pgq::kernels {

// C = op(A) x op(B) in f32. Sizes must be shape.sizeA(), sizeB(), sizeC().
void gemmF32(const GemmShape& shape, std::span<const float> a, std::span<const float> b,
             std::span<float> c);

// C = op(A) x op(B) with bf16 operands (their bit patterns, kernels/convert.h) and f32
// accumulation and result, run natively by oneDNN where hasBf16Gemm() (cpu_isa.h): the
// products of bf16 values are exact in f32, so this is the emulated bf16 GEMM (widen,
// then gemmF32) up to the order of the f32 sums, except that the bf16 dot-product
// instructions treat denormal inputs and results as zero. Throws KernelError without
// native bf16 (oneDNN's reference kernel would be orders of magnitude slower).
void gemmBf16(const GemmShape& shape, std::span<const uint16_t> a, std::span<const uint16_t> b,
              std::span<float> c);

// The largest K whose int32 sums cannot overflow: 255 * 128 * K < 2^31.
inline constexpr int64_t kMaxInt8GemmK = 65793;

// C = dequantized op(A) x op(B) in f32 (see the header comment). pa/pb are the params
// buffers computeQuantParams filled for lhsView(shape)/rhsView(shape). With
// `sum_squares`, also sumSquares(C) (optim.h), bit for bit: a weight gradient's share of
// the gradient norm. With one K segment and N a multiple of 8 the rescale pass sums the
// squares as it writes C, in sumSquares' blocks, instead of a pass that reads C again.
void int8Gemm(const GemmShape& shape, std::span<const uint8_t> qa, const QuantFormat& fa,
              std::span<const float> pa, std::span<const int8_t> qb, const QuantFormat& fb,
              std::span<const float> pb, std::span<float> c, double* sum_squares = nullptr);

// The integer part of int8Gemm, for exactness tests: c[b,m,n] = sum over K of
// (qa - za)(qb - zb), with zero points from the params (scales are ignored).
void int8GemmS32(const GemmShape& shape, std::span<const uint8_t> qa, const QuantFormat& fa,
                 std::span<const float> pa, std::span<const int8_t> qb, const QuantFormat& fb,
                 std::span<const float> pb, std::span<int32_t> c);

// Throws KernelError unless an fa x fb int8 GEMM is exact on a CPU with `caps`.
void checkExactInt8Gemm(const QuantFormat& fa, const QuantFormat& fb,
                        const Int8Caps& caps = int8Caps());

struct GemmFormats {
  QuantFormat lhs;
  QuantFormat rhs;
};

// The formats nearest to (lhs, rhs) that run exactly: unchanged when they already do,
// otherwise the `narrow` side drops to caps.max_bits_both bits (and any side above
// caps.max_bits_one drops to that).
GemmFormats exactGemmFormats(QuantFormat lhs, QuantFormat rhs, GemmSide narrow,
                             const Int8Caps& caps = int8Caps());

// Per-channel formats of `bits` bits that run exactly, e.g. on this CPU with bits = 8
// and narrow = kRhs: lhs int8:channel, rhs int7:channel.
GemmFormats defaultGemmFormats(int bits, Rounding lhs_rounding, Rounding rhs_rounding,
                               GemmSide narrow, const Int8Caps& caps = int8Caps());

}  // namespace pgq::kernels
