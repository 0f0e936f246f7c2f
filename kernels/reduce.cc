#include "kernels/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/kernel_error.h"
#include "kernels/quant_stats.h"
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

// Sums columns [0, width) of `rows` rows at x (row stride `inner`) into out[0, width).
void sumBlock(const float* x, int64_t rows, int64_t inner, int64_t width, double* out) {
  alignas(32) float part[kChunk];
  const int64_t padded = (width + 7) / 8 * 8;  // `part` is ours: whole vectors
  std::fill(out, out + width, 0.0);
  for (int64_t r0 = 0; r0 < rows; r0 += kFoldRows) {
    const int64_t r1 = std::min(rows, r0 + kFoldRows);
    std::fill(part, part + padded, 0.0f);
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = x + r * inner;
      for (int64_t j = 0; j < width; j += 8)
        _mm256_store_ps(part + j, _mm256_add_ps(_mm256_load_ps(part + j), loadPart(row + j, width - j)));
    }
    for (int64_t j = 0; j < width; ++j) out[j] += part[j];
  }
}

// Maxima of columns [0, width) of `rows` rows at x into out[0, width), NaN-propagating.
void maxBlock(const float* x, int64_t rows, int64_t inner, int64_t width, float* out) {
  alignas(32) float best[kChunk];
  const int64_t padded = (width + 7) / 8 * 8;
  std::fill(best, best + padded, kNegInf);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * inner;
    for (int64_t j = 0; j < width; j += 8) {
      const __m256 v = loadPart(row + j, width - j, kNegInf);
      // maxps(v, best) keeps an earlier NaN in best; the blend takes a new one from v.
      const __m256 m = _mm256_max_ps(v, _mm256_load_ps(best + j));
      _mm256_store_ps(best + j, _mm256_blendv_ps(m, v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    }
  }
  std::copy(best, best + width, out);
}

float maxWithNaN(float a, float b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b); }

// Column reduce of [outer, mid, inner]. The rows of each slab are cut into groups of
// a fixed size and the columns into L1-sized chunks; each (slab, group, chunk) is one
// task, so threads stream whole row segments (not narrow strided tiles), and a
// [tokens, d] gradient splits over tokens even when d is small. Group partials land in
// a scratch buffer and are combined in group order. Group size and chunk width depend
// only on the shape, so results do not depend on the thread count.
void reduceColumns(ReduceOp op, const float* x, float* y, int64_t outer, int64_t mid, int64_t inner) {
  if (op != ReduceOp::kMax && mid <= kFoldRows) {
    // A short reduced axis (the query heads that share a key/value head, under
    // grouped-query attention) is one fold of sumBlock: the f32 sum of the rows in order
    // is the result, written straight to y (the scratch in double and the second pass
    // below cost more than the sum). Bit-identical to the general path.
    const int64_t chunks = (inner + kChunk - 1) / kChunk;
    vec::parallelRanges(outer * chunks, mid * std::min(inner, kChunk), 1, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t o = task / chunks, c = task % chunks * kChunk, width = std::min(kChunk, inner - c);
        const float* block = x + o * mid * inner + c;
        float* out = y + o * inner + c;
        for (int64_t j = 0; j < width; j += 8) {
          __m256 sum = _mm256_setzero_ps();
          for (int64_t r = 0; r < mid; ++r) sum = _mm256_add_ps(sum, loadPart(block + r * inner + j, width - j));
          if (op == ReduceOp::kMean) {
            alignas(32) float lanes[8];
            _mm256_store_ps(lanes, sum);
            for (int64_t l = 0; l < std::min<int64_t>(8, width - j); ++l)
              out[j + l] = static_cast<float>(static_cast<double>(lanes[l]) / static_cast<double>(mid));
          } else {
            vec::storePart(out + j, width - j, sum);
          }
        }
      }
    });
    return;
  }
  constexpr int64_t kGroupRows = 256;
  const int64_t groups = std::max<int64_t>(1, (mid + kGroupRows - 1) / kGroupRows);
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  const bool is_max = op == ReduceOp::kMax;
  std::vector<double> sums(is_max ? 0 : static_cast<size_t>(outer * groups * inner));
  std::vector<float> maxima(is_max ? static_cast<size_t>(outer * groups * inner) : 0);
  const int64_t task_work = std::min(mid, kGroupRows) * std::min(inner, kChunk);
  vec::parallelRanges(outer * groups * chunks, task_work, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / (groups * chunks);
      const int64_t g = task / chunks % groups;
      const int64_t c = task % chunks * kChunk;
      const int64_t width = std::min(kChunk, inner - c);
      const int64_t r0 = g * kGroupRows;
      const int64_t rows = std::min(kGroupRows, mid - r0);
      const float* block = x + (o * mid + r0) * inner + c;
      const size_t at = static_cast<size_t>((o * groups + g) * inner + c);
      if (is_max)
        maxBlock(block, rows, inner, width, maxima.data() + at);
      else
        sumBlock(block, rows, inner, width, sums.data() + at);
    }
  });
  const double divisor = op == ReduceOp::kMean ? static_cast<double>(mid) : 1.0;
  vec::parallelRanges(outer * inner, groups, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t o = i / inner;
      const size_t first = static_cast<size_t>(o * groups * inner + i % inner);
      if (is_max) {
        float m = maxima[first];
        for (int64_t g = 1; g < groups; ++g) m = maxWithNaN(m, maxima[first + static_cast<size_t>(g * inner)]);
        y[i] = m;
      } else {
        double total = sums[first];
        for (int64_t g = 1; g < groups; ++g) total += sums[first + static_cast<size_t>(g * inner)];
        y[i] = static_cast<float>(total / divisor);
      }
    }
  });
}

// Sums of ref^2 and (approx - ref)^2 over the finite pairs of [0, n), and their count.
struct ErrorSums {
  double ref = 0, err = 0;
  int64_t count = 0;
};

ErrorSums errorSums(const float* reference, const float* approx, int64_t n) {
  const __m256 max = _mm256_set1_ps(std::numeric_limits<float>::max());
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256d ref0 = _mm256_setzero_pd(), ref1 = ref0, err0 = ref0, err1 = ref0;
  int64_t count = 0;
  auto widen = [](__m256 v, __m256d& lo, __m256d& hi) {
    lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
  };
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 r = loadPart(reference + i, n - i), a = loadPart(approx + i, n - i);
    // |v| <= max is false for NaN and +-Inf; masked-off tail lanes are 0 (finite, no
    // contribution) and are not counted.
    __m256 finite = _mm256_and_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, r), max, _CMP_LE_OQ),
                                  _mm256_cmp_ps(_mm256_andnot_ps(sign, a), max, _CMP_LE_OQ));
    if (n - i < 8) finite = _mm256_and_ps(finite, _mm256_castsi256_ps(vec::tailMask(n - i)));
    count += __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(finite)));
    __m256d r_lo, r_hi, a_lo, a_hi;
    widen(_mm256_and_ps(r, finite), r_lo, r_hi);
    widen(_mm256_and_ps(a, finite), a_lo, a_hi);
    // The difference in double is exact: no rounding before the square.
    const __m256d d_lo = _mm256_sub_pd(a_lo, r_lo), d_hi = _mm256_sub_pd(a_hi, r_hi);
    ref0 = _mm256_fmadd_pd(r_lo, r_lo, ref0);
    ref1 = _mm256_fmadd_pd(r_hi, r_hi, ref1);
    err0 = _mm256_fmadd_pd(d_lo, d_lo, err0);
    err1 = _mm256_fmadd_pd(d_hi, d_hi, err1);
  }
  return {vec::hsumDouble(_mm256_add_pd(ref0, ref1)), vec::hsumDouble(_mm256_add_pd(err0, err1)), count};
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
  reduceColumns(op, x, y, outer, mid, inner);
}

ErrorStats errorStats(const float* reference, const float* approx, int64_t n) {
  vec::checkSizes("errorStats", {n});
  // The chunk length depends on nothing but itself: every thread count sums the same
  // chunks and adds them in the same order.
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<ErrorSums> sums(static_cast<size_t>(chunks));
  vec::parallelRanges(chunks, kChunk, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t at = c * kChunk;
      sums[static_cast<size_t>(c)] = errorSums(reference + at, approx + at, std::min(kChunk, n - at));
    }
  });
  ErrorSums total;
  for (const ErrorSums& s : sums) {
    total.ref += s.ref;
    total.err += s.err;
    total.count += s.count;
  }
  ErrorStats stats;
  stats.finite_count = total.count;
  if (total.count > 0) {
    stats.mean_square = total.ref / static_cast<double>(total.count);
    stats.mse = total.err / static_cast<double>(total.count);
  }
  stats.sqnr = stats.mse > 0 ? std::min(stats.mean_square / stats.mse, kSqnrCap) : kSqnrCap;
  return stats;
}

float finiteAbsmax(const float* x, int64_t n) {
  float m = 0.0f;
#pragma omp parallel for simd reduction(max : m) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    // NaN fails the comparison; +-Inf is excluded explicitly.
    m = (a > m && a <= std::numeric_limits<float>::max()) ? a : m;
  }
  return m;
}

}  // namespace pgq::kernels
