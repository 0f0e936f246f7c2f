#pragma once
// Row normalizations over the last dim (`cols`) of a [rows, cols] f32 buffer, and
// their input gradients. There is no affine weight or bias: the graph multiplies by
// the gain separately, so its gradient comes from ordinary elementwise/reduce ops.
//
// Row statistics are summed in f32 blocks folded into f64 and the per-row scale is
// computed in f64, so results do not depend on the row length's rounding growth.
// Rows are independent: OpenMP splits them, results identical for any thread count.
// Every output may alias its x or dy input.
#include <cstdint>

namespace pgq::kernels {

// y = x * rsqrt(mean(x^2) + eps)
void rmsNorm(const float* x, float* y, int64_t rows, int64_t cols, float eps);

// dx = r * (dy - x * r^2 * mean(dy * x)), with r = rsqrt(mean(x^2) + eps).
void rmsNormGrad(const float* x, const float* dy, float* dx, int64_t rows, int64_t cols, float eps);

// y = (x - mean) * rsqrt(var + eps), with the biased variance like torch.
void layerNorm(const float* x, float* y, int64_t rows, int64_t cols, float eps);

// dx = r * (dy - mean(dy) - xhat * mean(dy * xhat)), with xhat the normalized x.
void layerNormGrad(const float* x, const float* dy, float* dx, int64_t rows, int64_t cols,
                   float eps);

}  // namespace pgq::kernels
