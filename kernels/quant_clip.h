#pragma once
// Clipping of a quantization group's range: the percentile of |x| and the search for
// the clip ratio that minimizes the quantization MSE. Both see the group's finite values
// as one contiguous array (the caller gathers them).
#include <span>
#include <utility>

#include "kernels/quant_format.h"

namespace pgq::kernels {

// The ratios the MSE search tries: 1, 0.98, ..., 1 - 0.02 * (kMseClipSteps - 1).
inline constexpr int kMseClipSteps = 40;

// Returns the clipped range of a group whose finite values are `values` (reordered in
// place) and whose full range is [lo, hi] (lo <= 0 <= hi), per format.clipping:
// kPercentile: symmetric [-c, c] with c the nearest-rank percentile of |x|; asymmetric
//   the lower and upper nearest-rank percentiles, widened to contain 0;
// kMse: r * [lo, hi] for the ratio r with the smallest round-to-nearest MSE;
// kNone: [lo, hi].
std::pair<double, double> clipRange(std::span<float> values, double lo, double hi,
                                    const QuantFormat& format);

// The mean squared round-to-nearest quantization error of `values` quantized as one
// group with the given scale and zero point (the arithmetic of quantize()).
double groupMse(std::span<const float> values, float scale, float zero_point,
                const QuantFormat& format);

}  // namespace pgq::kernels
