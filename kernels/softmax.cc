#include "kernels/softmax.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu_isa.h"
#include "kernels/kernel_error.h"
#include "kernels/vec_math.h"
#include "kernels/vec_math512.h"

namespace pgq::kernels {
namespace {

using vec::loadPart;
using vec::storePart;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kPrefetchRows = 4;

template <typename RowFn>
void forRows(int64_t rows, int64_t cols, RowFn row_fn) {
  vec::parallelRanges(rows, cols, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) row_fn(r);
  });
}

// The 512-bit path of expShiftSum (avx512Kernels()) over a loader's elements (a row of
// floats, or the fused softmax's prologue): vexp's operations on 16 lanes, lane
// for lane in its order, so each exp is the 256-bit one; and the sum in sumVectors'
// order: its chains p0, p1 are one 512-bit vector over elements [i, i + 16) of each
// 32, p2, p3 another over [i + 16, i + 32), the block's ragged end goes to p0 through
// the 256-bit exp, and each block is folded as (p0 + p1) + (p2 + p3) into double.
// Measured in docs/PERFORMANCE.md (the Zen 5 section).
PGQ_AVX512_BEGIN
template <typename Loader>
PGQ_AVX512 inline double expShiftSumAvx512(const Loader& in, float* y, int64_t n, float max) {
  constexpr int64_t kBlock = vec::kSumBlock;
  const __m512 vm = _mm512_set1_ps(max);
  const __m256 vm8 = _mm256_set1_ps(max);
  __m256d total = _mm256_setzero_pd();
  for (int64_t i = 0; i < n;) {
    const int64_t block_end = std::min(n, i + kBlock);
    __m512 p01 = _mm512_setzero_ps(), p23 = p01;
    for (; i + 32 <= block_end; i += 32) {
      const __m512 e01 = vec::vexp512(_mm512_sub_ps(in.load16(i), vm));
      const __m512 e23 = vec::vexp512(_mm512_sub_ps(in.load16(i + 16), vm));
      if (y != nullptr) {
        _mm512_storeu_ps(y + i, e01);
        _mm512_storeu_ps(y + i + 16, e23);
      }
      p01 = _mm512_add_ps(p01, e01);
      p23 = _mm512_add_ps(p23, e23);
    }
    __m256 p0 = _mm512_castps512_ps256(p01);
    const __m256 p1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(p01), 1));
    const __m256 p2 = _mm512_castps512_ps256(p23);
    const __m256 p3 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(p23), 1));
    for (; i < block_end; i += 8) {
      const __m256 e = vec::vexp(_mm256_sub_ps(in.load8(i, n - i), vm8));
      if (y != nullptr) storePart(y + i, n - i, e);
      p0 = _mm256_add_ps(p0, e);
    }
    const __m256 p = _mm256_add_ps(_mm256_add_ps(p0, p1), _mm256_add_ps(p2, p3));
    total = _mm256_add_pd(total, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
    total = _mm256_add_pd(total, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
  }
  return vec::hsumDouble(total);
}

struct PlainLoader {
  const float* x;
  PGQ_AVX512 __attribute__((always_inline)) __m512 load16(int64_t i) const { return _mm512_loadu_ps(x + i); }
  __attribute__((always_inline)) __m256 load8(int64_t i, int64_t k) const { return loadPart(x + i, k, kNegInf); }
};

// The fused softmax's prologue as its row is read: elements [i, i + 8) of x * scale,
// `fill` from `keep` on, -inf from k on (the tail lanes an exp sum must not count). The
// same operations as the separate mul and causal mask, so the same values.
struct Prologue8 {
  const float* x;
  int64_t keep;
  bool scaled;
  float scale, fill;
  __attribute__((always_inline)) __m256 load8(int64_t i, int64_t k) const {
    __m256 v = loadPart(x + i, k);
    if (scaled) v = _mm256_mul_ps(v, _mm256_set1_ps(scale));
    if (i + 8 > keep)
      v = _mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(vec::tailMask(std::max<int64_t>(keep - i, 0))));
    if (k < 8) v = _mm256_blendv_ps(_mm256_set1_ps(kNegInf), v, _mm256_castsi256_ps(vec::tailMask(k)));
    return v;
  }
};

// ... and elements [i, i + 16), for expShiftSumAvx512.
struct Prologue16 : Prologue8 {
  PGQ_AVX512 __attribute__((always_inline)) __m512 load16(int64_t i) const {
    __m512 v = _mm512_loadu_ps(x + i);
    if (scaled) v = _mm512_mul_ps(v, _mm512_set1_ps(scale));
    if (i + 16 > keep) {
      const auto k = static_cast<unsigned>(std::clamp<int64_t>(keep - i, 0, 16));
      v = _mm512_mask_blend_ps(static_cast<__mmask16>((1u << k) - 1), _mm512_set1_ps(fill), v);
    }
    return v;
  }
};

PGQ_AVX512 double expShiftSumAvx512(const float* x, float* y, int64_t n, float max) {
  return expShiftSumAvx512(PlainLoader{x}, y, n, max);
}
PGQ_AVX512 double expShiftSumAvx512(const Prologue16& in, float* y, int64_t n, float max) {
  return expShiftSumAvx512<Prologue16>(in, y, n, max);
}
PGQ_AVX512_END

// Max of a row of in.load8's elements (a row of floats: PlainLoader). maxps may drop a
// NaN here, but a NaN entry still turns the row's sum of exponentials into NaN, which is
// what the callers need.
template <typename Loader>
float rowMax(const Loader& in, int64_t n) {
  __m256 m = _mm256_set1_ps(kNegInf);
  for (int64_t i = 0; i < n; i += 8) m = _mm256_max_ps(m, in.load8(i, n - i));
  return vec::hmax(m);
}

float rowMax(const float* x, int64_t n) { return rowMax(PlainLoader{x}, n); }

// The 256-bit path of expShiftSum over in.load8's elements.
template <typename Loader>
double expShiftSum256(const Loader& in, float* y, int64_t n, float max) {
  const __m256 vm = _mm256_set1_ps(max);
  return vec::sumVectors(n, [&](int64_t i, int64_t k) {
    const __m256 e = vec::vexp(_mm256_sub_ps(in.load8(i, k), vm));
    if (y != nullptr) storePart(y + i, k, e);
    return e;
  });
}

// Writes exp(x - max) to y (when y is not null) and returns its sum. Tail lanes load
// as -inf, so they add exp(-inf) = 0.
double expShiftSum(const float* x, float* y, int64_t n, float max) {
  if (avx512Kernels()) return expShiftSumAvx512(x, y, n, max);
  return expShiftSum256(PlainLoader{x}, y, n, max);
}

// The same of the fused softmax's prologue.
double expShiftSum(const Prologue16& in, float* y, int64_t n, float max) {
  if (avx512Kernels()) return expShiftSumAvx512(in, y, n, max);
  return expShiftSum256(in, y, n, max);
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

// Query i of a [tq, tk] matrix sees keys 0 .. i + (tk - tq): how many of its row's
// entries the causal mask keeps.
int64_t keptKeys(int64_t i, int64_t tq, int64_t tk) { return std::clamp<int64_t>(i + (tk - tq) + 1, 0, tk); }

int64_t keptOfRow(int64_t r, int64_t cols, const SoftmaxPrologue& p) {
  return p.causal ? keptKeys(r % p.tq, p.tq, cols) : cols;
}

void checkPrologue(const char* kernel, int64_t rows, const SoftmaxPrologue& p) {
  if (p.causal && rows > 0 && (p.tq <= 0 || rows % p.tq != 0))
    throw KernelError::format("{}: {} rows are not whole [{}, cols] causal matrices", kernel, rows, p.tq);
}

// One row's softmax of xr into yr (xr may be yr).
void softmaxRow(const float* xr, float* yr, int64_t cols) {
  const float max = rowMax(xr, cols);
  if (max == kNegInf) {
    std::memset(yr, 0, static_cast<size_t>(cols) * sizeof(float));
    return;
  }
  const double sum = expShiftSum(xr, yr, cols, max);
  scaleRow(yr, cols, static_cast<float>(1.0 / sum));
}

}  // namespace

void softmax(const float* x, float* y, int64_t rows, int64_t cols) { softmax(x, y, rows, cols, {}); }

void softmax(const float* x, float* y, int64_t rows, int64_t cols, const SoftmaxPrologue& prologue) {
  vec::checkSizes("softmax", {rows, cols});
  checkPrologue("softmax", rows, prologue);
  if (cols == 0) return;
  const bool scaled = prologue.scale != 1.0f;
  forRows(rows, cols, [&](int64_t r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    if (!scaled && !prologue.causal) return softmaxRow(xr, yr, cols);
    // The row's softmax input (x * scale, `fill` from `keep` on) is made as the max and
    // the exponentials read the row (Prologue16), never stored: written into y and read
    // back, it cost more than the separate kernels on short rows (a 512-bit load waits
    // for the two 256-bit stores it spans). Whole vectors, with a blend where the mask
    // starts (a masked store costs ~10x a store on AMD cores).
    const int64_t keep = keptOfRow(r, cols, prologue);
    const int64_t keep8 = std::min(cols, (keep + 7) / 8 * 8);
    // A causal row reads only its first keep8 entries, which hides the stream from the
    // hardware prefetcher: the kept part of a row kPrefetchRows ahead is asked for here.
    if (prologue.causal && r + kPrefetchRows < rows) {
      const int64_t ahead = std::min(cols, keptOfRow(r + kPrefetchRows, cols, prologue) + 8);
      const char* p = reinterpret_cast<const char*>(xr + kPrefetchRows * cols);
      for (int64_t b = 0; b < ahead * static_cast<int64_t>(sizeof(float)); b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
    }
    const Prologue16 in{{xr, keep, scaled, prologue.scale, prologue.fill}};
    // Where exp(fill - max) is 0 (vexp zeroes x - max <= -104: a -inf fill always), the
    // masked keys add exact zeros to the sum and get 0 * (1 / sum): only the first `used`
    // entries are computed, `keep` rounded up to the 32 elements the sum takes per step,
    // so that every nonzero term lands in the chain it does over the whole row (the same
    // sum, bit for bit), and the rest is set to 0 * (1 / sum) (NaN in a row with a NaN
    // score, as over the whole row). A causal row skips half its keys on average.
    // max(kept, fill) of the first keep8 is the kept keys' max whenever that holds.
    const float head_max = rowMax(in, keep8);
    const bool masked_zero = keep < cols && prologue.fill - head_max <= -104.0f;
    const int64_t used = masked_zero ? std::min(cols, (keep + 31) / 32 * 32) : cols;
    const float max = masked_zero || keep8 == cols ? head_max : rowMax(in, cols);
    if (max == kNegInf) {
      std::memset(yr, 0, static_cast<size_t>(cols) * sizeof(float));
      return;
    }
    const auto inv = static_cast<float>(1.0 / expShiftSum(in, yr, used, max));
    scaleRow(yr, used, inv);
    const __m256 rest = _mm256_mul_ps(_mm256_setzero_ps(), _mm256_set1_ps(inv));
    for (int64_t j = used; j < cols; j += 8) storePart(yr + j, cols - j, rest);
  });
}

void softmaxGrad(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols) {
  softmaxGrad(y, dy, dx, rows, cols, {});
}

void softmaxGrad(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols,
                 const SoftmaxPrologue& prologue) {
  vec::checkSizes("softmaxGrad", {rows, cols});
  checkPrologue("softmaxGrad", rows, prologue);
  const bool scaled = prologue.scale != 1.0f;
  const __m256 vs = _mm256_set1_ps(prologue.scale);
  // A masked entry's gradient: the mask's 0, then scaled, as the separate kernels give it.
  const __m256 masked = scaled ? _mm256_mul_ps(_mm256_setzero_ps(), vs) : _mm256_setzero_ps();
  forRows(rows, cols, [&](int64_t r) {
    const float* yr = y + r * cols;
    const float* gr = dy + r * cols;
    // Over the whole row, masked entries too: the sum is softmaxGrad's, and a non-finite
    // dy there still reaches the row as it does through the separate kernels.
    const double dot = vec::sumVectors(
        cols, [&](int64_t i, int64_t k) { return _mm256_mul_ps(loadPart(yr + i, k), loadPart(gr + i, k)); });
    const __m256 vd = _mm256_set1_ps(static_cast<float>(dot));
    float* out = dx + r * cols;
    // Whole vectors, the one holding the last kept key blended (as softmax above).
    const int64_t keep = keptOfRow(r, cols, prologue);
    const int64_t keep8 = std::min(cols, (keep + 7) / 8 * 8);
    for (int64_t i = 0; i < keep8; i += 8) {
      const int64_t k = cols - i;
      __m256 g = _mm256_mul_ps(loadPart(yr + i, k), _mm256_sub_ps(loadPart(gr + i, k), vd));
      if (scaled) g = _mm256_mul_ps(g, vs);
      if (i + 8 > keep) g = _mm256_blendv_ps(masked, g, _mm256_castsi256_ps(vec::tailMask(keep - i)));
      storePart(out + i, k, g);
    }
    for (int64_t i = keep8; i < cols; i += 8) storePart(out + i, cols - i, masked);
  });
}

void causalMask(const float* x, float* y, int64_t batch, int64_t tq, int64_t tk, float value) {
  vec::checkSizes("causalMask", {batch, tq, tk});
  if (tk == 0) return;
  const __m256 vv = _mm256_set1_ps(value);
  forRows(batch * tq, tk, [&](int64_t r) {
    const int64_t keep = keptKeys(r % tq, tq, tk);
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
