#pragma once
// Statistics of a tensor under a quantization format, for the profiler: the tensor is
// quantized with exactly the arithmetic of computeQuantParams() + quantize() (same
// functions, rounding, clipping and stochastic-rounding noise stream) and dequantized, and one more pass
// accumulates the sums below. Two passes over the data (scales, then quantize + sums);
// clipping formats add the clip search of computeQuantParams(). Sums are accumulated in
// double per fixed work unit and combined in unit order: the result does not depend on
// the thread count. Emulated formats (float_quant.h) are described the same way with the
// arithmetic of computeQuantParams() + fakeQuantize(): Q(x) is the value the GEMM reads.
//
// Definitions (over the finite elements unless said otherwise):
//   mean_square  E[x^2]                      mse        E[(Q(x) - x)^2]
//   sqnr         mean_square / mse, a ratio (not dB), capped at kSqnrCap
//   zero_fraction       fraction with x == 0
//   underflow_fraction  fraction with x != 0 whose quantized value is 0
//   clipped_fraction    fraction beyond the grid by more than half a step (saturated):
//                       |x / s| > qmax + 1/2 for int grids, > max + half the step at max
//                       for FP8 elements (464 for e4m3, 61440 for e5m2), i.e. the values
//                       that saturation moved (within that margin rtn rounds to max anyway)
//   nan_count, inf_count   over all elements; NaN/Inf take no part in anything else
// Edge cases: when the error is exactly 0 (an all-zero tensor, a tensor with no finite
// element, or values that all land on the grid) sqnr is kSqnrCap, never 0/0. A constant
// tensor lands on the grid up to float rounding, so its sqnr is huge and capped. sqnr is
// never NaN.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/gemm_shape.h"
#include "kernels/quant_format.h"
#include "kernels/quantize.h"

namespace pgq::kernels {

// The SQNR reported when the quantization error is 0 or tiny: 1e12 (120 dB), far above
// any 2..8-bit format (~1e5 at 8 bits) and finite so averages over steps stay finite.
inline constexpr double kSqnrCap = 1e12;

struct QuantStats {
  int64_t count = 0;
  int64_t finite_count = 0;
  int64_t nan_count = 0;
  int64_t inf_count = 0;
  double absmax = 0.0;
  double mean_square = 0.0;
  double mse = 0.0;
  double sqnr = kSqnrCap;
  double zero_fraction = 0.0;
  double underflow_fraction = 0.0;
  double clipped_fraction = 0.0;
};

// Statistics of x quantized in `format` with scales computed from x itself.
QuantStats quantStats(std::span<const float> x, const OperandView& view, const QuantFormat& format,
                      SrStream sr = {});
// Statistics of x quantized with given params (e.g. the ones a GEMM really used).
// params_from_x: the params are computeQuantParams(x) (no other step's, no other
// tensor's), so formats whose scales cannot clip skip the clipped count (it is 0).
QuantStats quantStatsWithParams(std::span<const float> x, const OperandView& view,
                                const QuantFormat& format, std::span<const float> params,
                                SrStream sr = {}, bool params_from_x = false);

// quantStatsWithParams() of x in each of `formats` (params[i] the params of formats[i]),
// equal to it bit for bit. Formats that share a walk are measured in one pass that reads
// x, checks it and sums its squares once, and draws the stochastic-rounding noise once:
// symmetric integer grids with f32 scales and the same granularity, block and rounding
// whose params come from x (params_from_x), e.g. int8 and int7 per channel, the formats
// a CPU without VNNI is profiled in. The pass skips the clamp of round to nearest there,
// as no value can round beyond such a grid. Other formats are measured alone.
std::vector<QuantStats> quantStatsWithParams(std::span<const float> x, const OperandView& view,
                                             std::span<const QuantFormat> formats,
                                             std::span<const std::span<const float>> params,
                                             SrStream sr = {}, bool params_from_x = false);

// The quantization error as it sums along the contracting dimension, for the bias-aware
// SQNR (E[x^2] / this): mean over the rows (every batch x channel) of
// (sum_k (Q(x_k) - x_k))^2 / K, K the contracting length, with exactly the Q of
// quantStatsWithParams() (same params, rounding and noise stream; non-finite elements
// count as no error). It equals mse in expectation when the errors are independent and
// zero-mean (stochastic rounding), and exceeds it when errors along a row share a sign
// (round to nearest flushing small values of one sign to 0). Thread-count invariant.
double coherentErrorMeanSquare(std::span<const float> x, const OperandView& view, const QuantFormat& format,
                               std::span<const float> params, SrStream sr = {});

// 10 log10(sqnr).
double sqnrDb(double sqnr);
inline double sqnrDb(const QuantStats& stats) { return sqnrDb(stats.sqnr); }

}  // namespace pgq::kernels
