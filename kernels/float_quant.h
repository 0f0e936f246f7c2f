#pragma once
// Emulated quantization formats (support/quant_format.h: isEmulated()): FP8 elements
// (OCP E4M3, E5M2) and the FP4 element E2M1 with f32 scales, NVFP4's two-level scales,
// OCP Microscaling (MX) power-of-two block scales (MXFP8, MXINT8, MXFP4) and MOSS
// two-level scales. This CPU has no FP8 or FP4 arithmetic, so a GEMM
// in such a format runs as "fake quantization" (as torch.ao's fake_quantize): each
// operand is rounded to exactly the values the format represents, kept in f32, and an
// f32 GEMM reads it. Two kernel calls per operand and step:
//   computeEmulatedScales(x, view, format, params)       one f32 scale per group
//   fakeQuantize(x, view, format, params, out, sr)       f32 -> f32 on the format's grid
// computeQuantParams() (quantize.h) dispatches here for emulated formats, and quantStats()
// (quant_stats.h) reports their statistics; the int8-storage quantize(), quantizeDynamic()
// and dequantize() reject them. Buffers are caller-owned and checked against the view
// (KernelError on a mismatch); results are identical for any OpenMP thread count.
//
// Numerics. Groups are those of quant_format.h (per tensor, per channel, per block along
// the contracting dimension, the last block of a channel possibly shorter); params holds
// one f32 scale s per group, quantGroupCount(view, format) floats (no zero points).
// Group absmax values are over the finite elements (NaN and +-Inf are ignored, as in
// computeQuantParams), and E = elementLimits(format) (max, emin, emax, mantissa bits m).
//
// Scales (emulatedScaleFromAbsmax), for group absmax G and tensor absmax T:
//   scale=f32        s = max(G / E.max, kMinScale), in double, rounded to float once;
//                    s = 1 for the bf16 element (it has f32's range: no scale)
//   scale=e8m0       s = 2^clamp(floor(log2 G) - E.emax, -126, 127), G = 0 -> 2^-126
//                    (OCP MX v1.0 sec. 6.3; E.emax is 8 for e4m3, 15 for e5m2, bits - 2
//                    for int elements, so MXINT8 holds k * 2^-6 * 2^X, k in [-127, 127]).
//                    G lands in [2^8, 2^9) for e4m3: its values above 448 saturate, as
//                    the spec's conversion does.
//   scale=e4m3   (NVFP4) S = 448 * E.max / T in f32; each group s = e4m3(G * (S * (1 /
//                E.max))) / S (in f32, rounded once to nearest): Transformer Engine's
//                two-level scale, one f32 per group. G = 0: kMinScale; an E4M3 value that
//                underflows to 0: 2^125, over which every finite value of the group
//                rounds to 0 (it decodes to 0 on the GPU) and an infinity saturates.
//   2-D (block<N>x<N>) groups are N x N tiles of each stored matrix, their absmax over
//   the tile; a format with rht quantizes the transformed values (hadamard.h), its
//   scales those of the transformed values, and gives back D H Q(H D x).
//   scale=two_level  (MOSS) g = max(T / E.max, kMinScale) rounded to float; each group
//                    s = g * 2^ceil(log2(G / T)) (exact: a power of two), clamped to
//                    [FLT_MIN, FLT_MAX]; G = 0 -> s = g. No group is clipped: G / s <=
//                    T / g, which is E.max up to the rounding of g.
// Absmax arguments are clamped to [0, FLT_MAX] (NaN counts as 0); a tensor absmax below
// the group's is raised to it.
//
// Values: out[i] = s * Q(v) rounded to float (exact for power-of-two scales), where
// v = x[i] * inv rounded to float and inv = 1/s rounded to float (as the int path).
// Q first clamps, c = clamp(v, -E.max, E.max) (OCP's saturating mode: +-Inf and
// magnitudes beyond max become +-max; NaN stays NaN, int elements too, so the f32 GEMM
// shows it), then rounds c onto the grid of step
//   q = 2^(max(floor(log2 |c|), emin) - m)  for FP8 elements (normal values and the
//                                           subnormals below 2^emin share that step)
//   q = 1                                   for int elements (max = qmax = 2^(bits-1) - 1)
//   bf16: no clamp (bf16 does not saturate: values beyond its max round to +-Inf, as
//         the bf16 GEMM's conversion in convert.h and torch's .to(bfloat16) do; Inf stays
//         Inf), then the float's bits rounded to their upper 16: the same values as q
//         with emin -126 and m 7, down to f32's subnormals, whose step 2^-133 no
//         exponent field builds; sr adds the 16 noise bits before dropping the low half
// with f = c / q (exact):
//   rtn  Q = q * round_ties_even(f): the nearest grid value, ties to the even code; the
//        sign of zero is kept
//   sr   Q = q * floor((trunc(f * 2^16) + r) / 2^16), r the element's 16 noise bits
//        (sr_noise.h: ARS-5 keyed by (sr.seed, sr.offset, flat element index)): the
//        fixed-point rounding of quantize() (quant_core.h) on this grid. Q is one of the
//        two grid values around c, the one farther from zero with probability |frac(f)|
//        truncated to 16 bits, so E[Q] is within 2^-16 q of c (toward zero); a zero
//        result is +0.
// Every rounding is explicit (round/truncate instructions), so MXCSR's rounding mode does
// not matter; denormals must not be flushed (the default).
#include <cstdint>
#include <span>

#include "kernels/gemm_shape.h"
#include "kernels/quant_format.h"
#include "kernels/quantize.h"

namespace pgq::kernels {

// Fills params[0, quantGroupCount(view, format)) with each group's scale (above).
// Throws KernelError unless format.isEmulated() and the buffers match the view.
// Formats with a Hadamard transform (hadamard.h) compute the scales of the transformed
// values, with the signs of sr.offset.
void computeEmulatedScales(std::span<const float> x, const OperandView& view,
                           const QuantFormat& format, std::span<float> params, SrStream sr = {});

// The scale of a group from its absmax and the tensor's (for per-tensor groups pass the
// same value twice; only two_level reads tensor_absmax). Delayed scaling feeds it an
// absmax from its history.
float emulatedScaleFromAbsmax(double group_absmax, double tensor_absmax, const QuantFormat& format);

// out[i] = the value format represents for x[i] with its group's scale (above). x and out
// may be the same buffer (in place) but must not overlap otherwise. Throws KernelError
// unless format.isEmulated(), the buffers match the view, and every scale is a finite
// float >= kMinScale (a power of two for scale=e8m0).
void fakeQuantize(std::span<const float> x, const OperandView& view, const QuantFormat& format,
                  std::span<const float> params, std::span<float> out, SrStream sr = {});

// Scalar reference of one element, for tests and as the definition: Q(v) for v already
// divided by the scale; noise16 (< 2^16) is r of stochastic rounding, unused by rtn.
float roundToElement(float v, const QuantFormat& format, uint32_t noise16 = 0);

}  // namespace pgq::kernels
