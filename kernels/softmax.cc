#include "kernels/softmax.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/kernel_error.h"
#include "kernels/vec_math.h"

namespace pgq::kernels {
namespace {

using vec::loadPart;
using vec::storePart;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <typename RowFn>
void forRows(int64_t rows, int64_t cols, RowFn row_fn) {
  vec::parallelRanges(rows, cols, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) row_fn(r);
  });
}

// Max of a row. maxps may drop a NaN here, but a NaN entry still turns the row's sum
// of exponentials into NaN, which is what the callers need.
float rowMax(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(kNegInf);
  for (int64_t i = 0; i < n; i += 8) m = _mm256_max_ps(m, loadPart(x + i, n - i, kNegInf));
  return vec::hmax(m);
}

// Writes exp(x - max) to y (when y is not null) and returns its sum. Tail lanes load
// as -inf, so they add exp(-inf) = 0.
double expShiftSum(const float* x, float* y, int64_t n, float max) {
  const __m256 vm = _mm256_set1_ps(max);
  return vec::sumVectors(n, [&](int64_t i, int64_t k) {
    const __m256 e = vec::vexp(_mm256_sub_ps(loadPart(x + i, k, kNegInf), vm));
    if (y != nullptr) storePart(y + i, k, e);
    return e;
  });
}

void scaleRow(float* y, int64_t n, float scale) {
  const __m256 vs = _mm256_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 8) storePart(y + i, n - i, _mm256_mul_ps(loadPart(y + i, n - i), vs));
}

void checkTargets(const char* kernel, const int32_t* targets, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] < 0 || targets[r] >= cols)
      throw KernelError::format("{}: target {} of row {} is outside [0, {})", kernel, targets[r], r,
                                cols);
  }
}

}  // namespace

void softmax(const float* x, float* y, int64_t rows, int64_t cols) {
  vec::checkSizes("softmax", {rows, cols});
  if (cols == 0) return;
  forRows(rows, cols, [&](int64_t r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const float max = rowMax(xr, cols);
    if (max == kNegInf) {
      std::memset(yr, 0, static_cast<size_t>(cols) * sizeof(float));
      return;
    }
    const double sum = expShiftSum(xr, yr, cols, max);
    scaleRow(yr, cols, static_cast<float>(1.0 / sum));
  });
}

void softmaxGrad(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols) {
  vec::checkSizes("softmaxGrad", {rows, cols});
  forRows(rows, cols, [&](int64_t r) {
    const float* yr = y + r * cols;
    const float* gr = dy + r * cols;
    const double dot = vec::sumVectors(
        cols, [&](int64_t i, int64_t k) { return _mm256_mul_ps(loadPart(yr + i, k), loadPart(gr + i, k)); });
    const __m256 vd = _mm256_set1_ps(static_cast<float>(dot));
    float* out = dx + r * cols;
    for (int64_t i = 0; i < cols; i += 8) {
      const int64_t k = cols - i;
      storePart(out + i, k, _mm256_mul_ps(loadPart(yr + i, k), _mm256_sub_ps(loadPart(gr + i, k), vd)));
    }
  });
}

void causalMask(const float* x, float* y, int64_t batch, int64_t tq, int64_t tk, float value) {
  vec::checkSizes("causalMask", {batch, tq, tk});
  if (tk == 0) return;
  const __m256 vv = _mm256_set1_ps(value);
  forRows(batch * tq, tk, [&](int64_t r) {
    const int64_t i = r % tq;
    // Query i sees keys 0 .. i + (tk - tq).
    const int64_t keep = std::clamp<int64_t>(i + (tk - tq) + 1, 0, tk);
    const float* xr = x + r * tk;
    float* yr = y + r * tk;
    if (xr != yr) std::memcpy(yr, xr, static_cast<size_t>(keep) * sizeof(float));
    for (int64_t j = keep; j < tk; j += 8) storePart(yr + j, tk - j, vv);
  });
}

float crossEntropy(const float* logits, const int32_t* targets, int64_t rows, int64_t cols) {
  vec::checkSizes("crossEntropy", {rows, cols});
  checkTargets("crossEntropy", targets, rows, cols);
  if (rows == 0) return 0.0f;
  // Per-row losses summed afterwards in row order: the result does not depend on how
  // rows were split among threads.
  std::vector<double> losses(static_cast<size_t>(rows));
  forRows(rows, cols, [&](int64_t r) {
    const float* xr = logits + r * cols;
    const float max = rowMax(xr, cols);
    const double log_sum_exp = max + std::log(expShiftSum(xr, nullptr, cols, max));
    losses[static_cast<size_t>(r)] = log_sum_exp - xr[targets[r]];
  });
  double total = 0.0;
  for (double l : losses) total += l;
  return static_cast<float>(total / static_cast<double>(rows));
}

void crossEntropyGrad(const float* logits, const int32_t* targets, float dloss, float* dlogits,
                      int64_t rows, int64_t cols) {
  vec::checkSizes("crossEntropyGrad", {rows, cols});
  checkTargets("crossEntropyGrad", targets, rows, cols);
  const double scale = static_cast<double>(dloss) / static_cast<double>(rows);
  forRows(rows, cols, [&](int64_t r) {
    const float* xr = logits + r * cols;
    float* gr = dlogits + r * cols;
    const float max = rowMax(xr, cols);
    const double sum = expShiftSum(xr, gr, cols, max);
    scaleRow(gr, cols, static_cast<float>(scale / sum));
    gr[targets[r]] -= static_cast<float>(scale);
  });
}

}  // namespace pgq::kernels
