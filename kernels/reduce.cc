#include "kernels/reduce.h"

#include <algorithm>
#include <limits>

#include "kernels/kernel_error.h"
#include "kernels/vec_math.h"

namespace pgq::kernels {
namespace {

using vec::loadPart;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Column reduces stream whole row slices of up to kChunk columns into partial
// results kept in L1. (Walking a narrow tile of columns down all rows instead would
// touch a new 4 KiB page every few rows and defeat the hardware prefetcher.)
constexpr int64_t kChunk = 512;
// Rows summed in f32 before folding into f64: each lane adds at most 16 terms.
constexpr int64_t kFoldRows = 16;

// Row maximum that keeps a NaN: maxps(a, b) returns b when one is NaN, so the NaN
// flag is tracked separately and applied at the end.
struct MaxAccumulator {
  __m256 max = _mm256_set1_ps(kNegInf);
  __m256 nan = _mm256_setzero_ps();
  void add(__m256 v) {
    max = _mm256_max_ps(max, v);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  float scalar() const { return _mm256_movemask_ps(nan) != 0 ? kNaN : vec::hmax(max); }
};

float rowReduce(ReduceOp op, const float* x, int64_t n) {
  if (op == ReduceOp::kMax) {
    MaxAccumulator acc;
    for (int64_t i = 0; i < n; i += 8) acc.add(loadPart(x + i, n - i, kNegInf));
    return acc.scalar();
  }
  const double sum = vec::sumVectors(n, [&](int64_t i, int64_t k) { return loadPart(x + i, k); });
  return static_cast<float>(op == ReduceOp::kMean ? sum / static_cast<double>(n) : sum);
}

// Sums columns [0, width) of a [mid, inner] slab at x into y, divided by `divisor`.
void sumColumns(const float* x, float* y, int64_t mid, int64_t inner, int64_t width, double divisor) {
  alignas(32) float part[kChunk];
  alignas(32) double total[kChunk];
  const int64_t padded = (width + 7) / 8 * 8;  // the buffers are ours: whole vectors
  std::fill(total, total + padded, 0.0);
  for (int64_t r0 = 0; r0 < mid; r0 += kFoldRows) {
    const int64_t r1 = std::min(mid, r0 + kFoldRows);
    std::fill(part, part + padded, 0.0f);
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = x + r * inner;
      for (int64_t j = 0; j < width; j += 8)
        _mm256_store_ps(part + j, _mm256_add_ps(_mm256_load_ps(part + j), loadPart(row + j, width - j)));
    }
    for (int64_t j = 0; j < padded; j += 8) {
      const __m256 p = _mm256_load_ps(part + j);
      _mm256_store_pd(total + j, _mm256_add_pd(_mm256_load_pd(total + j), _mm256_cvtps_pd(_mm256_castps256_ps128(p))));
      _mm256_store_pd(total + j + 4,
                      _mm256_add_pd(_mm256_load_pd(total + j + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1))));
    }
  }
  for (int64_t j = 0; j < width; ++j) y[j] = static_cast<float>(total[j] / divisor);
}

void maxColumns(const float* x, float* y, int64_t mid, int64_t inner, int64_t width) {
  alignas(32) float best[kChunk];
  const int64_t padded = (width + 7) / 8 * 8;
  std::fill(best, best + padded, kNegInf);
  for (int64_t r = 0; r < mid; ++r) {
    const float* row = x + r * inner;
    for (int64_t j = 0; j < width; j += 8) {
      const __m256 v = loadPart(row + j, width - j, kNegInf);
      // maxps(v, best) keeps an earlier NaN in best; the blend takes a new one from v.
      const __m256 m = _mm256_max_ps(v, _mm256_load_ps(best + j));
      _mm256_store_ps(best + j, _mm256_blendv_ps(m, v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    }
  }
  std::copy(best, best + width, y);
}

}  // namespace

void reduce(ReduceOp op, const float* x, float* y, int64_t outer, int64_t mid, int64_t inner) {
  vec::checkSizes("reduce", {outer, mid, inner});
  if (op != ReduceOp::kSum && op != ReduceOp::kMax && op != ReduceOp::kMean)
    throw KernelError::format("reduce: unknown ReduceOp {}", static_cast<int>(op));
  if (inner == 1) {
    vec::parallelRanges(outer, mid, 1, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) y[o] = rowReduce(op, x + o * mid, mid);
    });
    return;
  }
  // Column reduce: one task per (outer index, chunk of columns). The chunk width only
  // decides which thread does a column; each column is summed down its rows in the
  // same order whatever the width, so results do not depend on the thread count.
  const int64_t threads = vec::availableThreads();
  const int64_t per_thread = ((inner + threads - 1) / threads + 15) / 16 * 16;
  const int64_t width = std::clamp<int64_t>(outer >= threads ? inner : per_thread, 16, kChunk);
  const int64_t chunks = (inner + width - 1) / width;
  const double divisor = op == ReduceOp::kMean ? static_cast<double>(mid) : 1.0;
  vec::parallelRanges(outer * chunks, mid * width, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / chunks;
      const int64_t c = task % chunks * width;
      const int64_t w = std::min(width, inner - c);
      const float* xs = x + o * mid * inner + c;
      if (op == ReduceOp::kMax)
        maxColumns(xs, y + o * inner + c, mid, inner, w);
      else
        sumColumns(xs, y + o * inner + c, mid, inner, w, divisor);
    }
  });
}

}  // namespace pgq::kernels
