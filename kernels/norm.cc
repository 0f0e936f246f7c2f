#include "kernels/norm.h"

#include <cmath>

#include "kernels/vec_math.h"

namespace pgq::kernels {
namespace {

using vec::loadPart;
using vec::storePart;

// Runs row_fn(r) for every row, rows split among threads.
template <typename RowFn>
void forRows(int64_t rows, int64_t cols, RowFn row_fn) {
  vec::parallelRanges(rows, cols, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) row_fn(r);
  });
}

// rsqrt(mean_square + eps) in f64: one per row, so the extra precision is free.
float invRms(double sum_squares, int64_t cols, float eps) {
  return static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(cols) + eps));
}

double rowSum(const float* x, int64_t n) {
  return vec::sumVectors(n, [&](int64_t i, int64_t k) { return loadPart(x + i, k); });
}

double rowSumSquares(const float* x, int64_t n) {
  return vec::sumVectors(n, [&](int64_t i, int64_t k) {
    const __m256 v = loadPart(x + i, k);
    return _mm256_mul_ps(v, v);
  });
}

double rowDot(const float* a, const float* b, int64_t n) {
  return vec::sumVectors(n, [&](int64_t i, int64_t k) { return _mm256_mul_ps(loadPart(a + i, k), loadPart(b + i, k)); });
}

// (x - mean) over a row, with tail lanes 0 (not -mean).
__m256 centered(const float* x, int64_t k, float mean) {
  return _mm256_sub_ps(k >= 8 ? _mm256_loadu_ps(x) : vec::loadTail(x, k, mean), _mm256_set1_ps(mean));
}

// y = (x - shift) * scale over one row.
void shiftScale(const float* x, float* y, int64_t n, float shift, float scale) {
  const __m256 vs = _mm256_set1_ps(shift);
  const __m256 vk = _mm256_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 8)
    storePart(y + i, n - i, _mm256_mul_ps(_mm256_sub_ps(loadPart(x + i, n - i), vs), vk));
}

}  // namespace

void rmsNorm(const float* x, float* y, int64_t rows, int64_t cols, float eps) {
  vec::checkSizes("rmsNorm", {rows, cols});
  if (cols == 0) return;
  forRows(rows, cols, [&](int64_t r) {
    const float* xr = x + r * cols;
    shiftScale(xr, y + r * cols, cols, 0.0f, invRms(rowSumSquares(xr, cols), cols, eps));
  });
}

void rmsNormGrad(const float* x, const float* dy, float* dx, int64_t rows, int64_t cols,
                 float eps) {
  vec::checkSizes("rmsNormGrad", {rows, cols});
  if (cols == 0) return;
  forRows(rows, cols, [&](int64_t r) {
    const float* xr = x + r * cols;
    const float* gr = dy + r * cols;
    // Separate passes over the row (it is in L1 after the first): each sum then runs
    // on four independent chains.
    const double ss = rowSumSquares(xr, cols);
    const double dot = rowDot(xr, gr, cols);
    // y = x r with r = (ms + eps)^-1/2 and d r / d x_j = -r^3 x_j / cols, so
    // dx_j = r (dy_j - x_j r^2 sum(dy x) / cols). Scaling by r last keeps the
    // cancellation inside the bracket at the magnitude of dy.
    const double rd = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
    const __m256 vr = _mm256_set1_ps(static_cast<float>(rd));
    const __m256 vc = _mm256_set1_ps(static_cast<float>(rd * rd * dot / static_cast<double>(cols)));
    float* out = dx + r * cols;
    for (int64_t i = 0; i < cols; i += 8) {
      const int64_t k = cols - i;
      const __m256 g = _mm256_fnmadd_ps(vc, loadPart(xr + i, k), loadPart(gr + i, k));
      storePart(out + i, k, _mm256_mul_ps(vr, g));
    }
  });
}

void layerNorm(const float* x, float* y, int64_t rows, int64_t cols, float eps) {
  vec::checkSizes("layerNorm", {rows, cols});
  if (cols == 0) return;
  forRows(rows, cols, [&](int64_t r) {
    const float* xr = x + r * cols;
    // Two passes (mean, then squares around it): the one-pass E[x^2] - E[x]^2 cancels
    // when |mean| >> std. The row is in L1 for the second pass.
    const float mean = static_cast<float>(rowSum(xr, cols) / static_cast<double>(cols));
    const double ss = vec::sumVectors(cols, [&](int64_t i, int64_t k) {
      const __m256 d = centered(xr + i, k, mean);
      return _mm256_mul_ps(d, d);
    });
    shiftScale(xr, y + r * cols, cols, mean, invRms(ss, cols, eps));
  });
}

void layerNormGrad(const float* x, const float* dy, float* dx, int64_t rows, int64_t cols,
                   float eps) {
  vec::checkSizes("layerNormGrad", {rows, cols});
  if (cols == 0) return;
  forRows(rows, cols, [&](int64_t r) {
    const float* xr = x + r * cols;
    const float* gr = dy + r * cols;
    const double n = static_cast<double>(cols);
    const float mean = static_cast<float>(rowSum(xr, cols) / n);
    const __m256 vm = _mm256_set1_ps(mean);
    const double ss = vec::sumVectors(cols, [&](int64_t i, int64_t k) {
      const __m256 d = centered(xr + i, k, mean);
      return _mm256_mul_ps(d, d);
    });
    const double sum_dy = rowSum(gr, cols);
    const double dot = vec::sumVectors(cols, [&](int64_t i, int64_t k) {  // sum(dy * (x - mean))
      return _mm256_mul_ps(centered(xr + i, k, mean), loadPart(gr + i, k));
    });
    // With xhat = (x - mean) r:  dx = r (dy - mean(dy) - (x - mean) r^2 mean(dy (x - mean))).
    // The bracket is formed at the scale of dy and multiplied by r last: r can be
    // large (1/sqrt(eps) for a constant row) and would amplify a cancellation.
    const double rd = 1.0 / std::sqrt(ss / n + eps);
    const __m256 vr = _mm256_set1_ps(static_cast<float>(rd));
    const __m256 vb = _mm256_set1_ps(static_cast<float>(sum_dy / n));
    const __m256 vc = _mm256_set1_ps(static_cast<float>(rd * rd * dot / n));
    float* out = dx + r * cols;
    for (int64_t i = 0; i < cols; i += 8) {
      const int64_t k = cols - i;
      const __m256 d = _mm256_sub_ps(loadPart(xr + i, k), vm);
      const __m256 g = _mm256_fnmadd_ps(vc, d, _mm256_sub_ps(loadPart(gr + i, k), vb));
      storePart(out + i, k, _mm256_mul_ps(vr, g));
    }
  });
}

}  // namespace pgq::kernels
