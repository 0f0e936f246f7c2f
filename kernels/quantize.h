#pragma once
// Quantization of a GEMM operand, as two kernel calls per training step:
//   computeQuantParams(x, view, format, params)        scales (and zero points)
//   quantize(x, view, format, params, out, sr)         f32 -> u8 (lhs) or s8 (rhs)
// or as one, quantizeDynamic(x, view, format, params, out, sr), with the same results.
// Buffers are caller-owned; sizes are checked against the view (KernelError on a
// mismatch). Results are identical for any OpenMP thread count.
//
// Numerics (quant_core.h has the exact formula):
// - Scales are absmax / qmax (symmetric) or (max - min) / (2^bits - 1) with the range
//   widened to contain 0 (asymmetric), per group (quant_format.h), after optional
//   clipping. A group whose range is 0 (all zeros) or tiny gets the scale kMinScale, so
//   nothing divides by zero and 1/scale stays finite; all its values quantize to 0.
// - NaN and +-Inf are ignored when computing scales. NaN quantizes to 0 (the zero
//   point), +-Inf saturate to the ends of the grid. Values outside the (clipped) range
//   saturate; nothing wraps.
// - Rounding: ties-to-even, or stochastic with 16 random bits per element from the
//   counter-based ARS-5 generator keyed by (sr.seed, sr.offset, element index)
//   (sr_noise.h): bias below 2^-16 of a step, identical for any thread count.
// - Clipping: percentile of |x| (nearest rank; per tail when asymmetric), or the ratio
//   r in {1, 0.98, ..., 0.22} of the range minimizing the round-to-nearest MSE of the
//   group (ties go to the larger r). Clipping costs a copy and a selection (percentile)
//   or 40 quantization passes (MSE) per group on top of the range pass.
#include <cstdint>
#include <limits>
#include <span>

#include "kernels/gemm_shape.h"
#include "kernels/quant_format.h"

namespace pgq::kernels {

// The smallest scale a group gets (FLT_MIN: 1/scale is still finite).
inline constexpr float kMinScale = std::numeric_limits<float>::min();

// The noise stream of stochastic rounding. The runtime passes a fresh offset every step
// so each step draws fresh noise; tensors quantized in the same step should use
// different seeds (equal seed, offset and index give equal noise).
struct SrStream {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// Fills params[0, quantParamCount(view, format)) (layout in quant_format.h). sr matters
// only to formats with a Hadamard transform (its signs come from sr.offset, the step).
void computeQuantParams(std::span<const float> x, const OperandView& view,
                        const QuantFormat& format, std::span<float> params, SrStream sr = {});
// computeQuantParams() for each of `formats` (params[i] for formats[i]), equal to it bit
// for bit; formats whose scales come from the same group ranges (integer grids without
// clipping and with the same groups, e.g. int8 and int7 per channel) share one pass over x.
void computeQuantParams(std::span<const float> x, const OperandView& view, std::span<const QuantFormat> formats,
                        std::span<const std::span<float>> params, SrStream sr = {});

// Quantizes x into the GEMM lhs storage: u8 = grid integer + storageOffset(format, kLhs).
void quantize(std::span<const float> x, const OperandView& view, const QuantFormat& format,
              std::span<const float> params, std::span<uint8_t> out, SrStream sr = {});
// Quantizes x into the GEMM rhs storage: s8 = grid integer + storageOffset(format, kRhs).
void quantize(std::span<const float> x, const OperandView& view, const QuantFormat& format,
              std::span<const float> params, std::span<int8_t> out, SrStream sr = {});

// computeQuantParams + quantize in one call, with results identical to the two calls.
// For per-channel and per-block scales along the rows of the stored matrix (A [M,K],
// B stored [N,K]) without clipping, each row's scales are computed and the row
// quantized while it is still in L1, saving one read of x; other cases run the two
// passes.
void quantizeDynamic(std::span<const float> x, const OperandView& view, const QuantFormat& format,
                     std::span<float> params, std::span<uint8_t> out, SrStream sr = {});
void quantizeDynamic(std::span<const float> x, const OperandView& view, const QuantFormat& format,
                     std::span<float> params, std::span<int8_t> out, SrStream sr = {});

// The values a quantized tensor stands for: scale * (stored - zero point - offset).
void dequantize(std::span<const uint8_t> q, const OperandView& view, const QuantFormat& format,
                std::span<const float> params, std::span<float> out);
void dequantize(std::span<const int8_t> q, const OperandView& view, const QuantFormat& format,
                std::span<const float> params, std::span<float> out);

}  // namespace pgq::kernels
