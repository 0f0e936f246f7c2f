#pragma once
// Internal helpers shared by the f32 kernels (elementwise, norm, softmax, reduce,
// layout, convert, optim): AVX2 math functions, vector tails and OpenMP splitting.
// Not part of the public kernel API.
//
// Accuracy: vexp and vlog are the Cephes single-precision algorithms (<= 2 ulp over
// the whole range, denormal results and inputs included); vtanh is Cephes tanhf
// (<= 3 ulp). They are written here rather than taken from Eigen because the kernels
// fuse them with other arithmetic inside one pass over the data, and because Eigen's
// float exp clamps its input (exp(-1000) returns ~3e-39 instead of 0).
//
// Determinism: the last, partial vector of a range goes through the same vector code
// with masked loads and stores, so every element gets bit-identical results wherever
// a thread boundary falls. Masked loads never touch the masked-off lanes, so vector
// tails read no byte outside the buffers.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "kernels/kernel_error.h"

namespace pgq::kernels::vec {

// Sizes come from the executor; a negative one is a caller bug that would otherwise
// turn into a huge unsigned count somewhere.
inline void checkSizes(const char* kernel, std::initializer_list<int64_t> sizes) {
  for (int64_t s : sizes)
    if (s < 0) throw KernelError::format("{}: sizes must be >= 0, got {}", kernel, s);
}

// Below this much work (elements touched) a parallel region costs more than it saves:
// waking the second thread is a few microseconds, and 16K floats stream from cache in
// about the same time.
inline constexpr int64_t kMinParallelWork = 16384;

inline int availableThreads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

// Splits [0, n) into one contiguous range per thread, with boundaries at multiples of
// `align` items, and calls body(begin, end) on each. Runs inline when the total work
// (n * work_per_item) is small. The body must not throw (exceptions cannot leave an
// OpenMP region), so callers validate their arguments before calling this.
template <typename Body>
void parallelRanges(int64_t n, int64_t work_per_item, int64_t align, Body&& body) {
  if (n <= 0) return;
  int threads = availableThreads();
  const int64_t chunks = (n + align - 1) / align;
  if (threads <= 1 || chunks < 2 || n * work_per_item < kMinParallelWork) {
    body(int64_t{0}, n);
    return;
  }
  threads = static_cast<int>(std::min<int64_t>(threads, chunks));
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t begin = std::min(n, chunks * t / nt * align);
    const int64_t end = std::min(n, chunks * (t + 1) / nt * align);
    if (begin < end) body(begin, end);
  }
}

// Lane mask with the first k (0..8) lanes set, for maskload/maskstore on a tail.
inline __m256i tailMask(int64_t k) {
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(k)), iota);
}

// Loads the first k lanes; the other lanes hold `fill` (0 for sums, -inf for maxima).
inline __m256 loadTail(const float* p, int64_t k, float fill = 0.0f) {
  const __m256i mask = tailMask(k);
  const __m256 v = _mm256_maskload_ps(p, mask);
  return _mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(mask));
}

inline void storeTail(float* p, int64_t k, __m256 v) { _mm256_maskstore_ps(p, tailMask(k), v); }

// Row loops step 8 at a time with k = remaining elements: a full vector when k >= 8,
// the masked tail otherwise. The branch is taken the same way until the last step.
inline __m256 loadPart(const float* p, int64_t k, float fill = 0.0f) {
  return k >= 8 ? _mm256_loadu_ps(p) : loadTail(p, k, fill);
}

inline void storePart(float* p, int64_t k, __m256 v) {
  if (k >= 8)
    _mm256_storeu_ps(p, v);
  else
    storeTail(p, k, v);
}

inline double hsumDouble(__m256d v) {
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Sum over a row of n floats of term(i, k), the f32 vector for elements [i, i + 8)
// with k = elements left from i (k >= 8: a full vector; k < 8: the tail, whose unused
// lanes must be 0). term is called once per i, in order, so it may also store.
//
// Four independent f32 chains hide the add latency (one chain would bound a row
// reduction at one vector per 3-4 cycles). Each chain adds about 16 terms per lane
// (at most 19, in the last block) before the block is folded into f64, so a row of 1024 loses no more than a few f32
// roundings per 16 terms, and long sums (sumSquares over millions) stay accurate.
inline constexpr int64_t kSumBlock = 4 * 16 * 8;  // sumVectors' block (softmax.cc's 512-bit path keeps it)

template <typename Term>
double sumVectors(int64_t n, Term term) {
  constexpr int64_t kBlock = kSumBlock;
  __m256d total = _mm256_setzero_pd();
  for (int64_t i = 0; i < n;) {
    const int64_t block_end = std::min(n, i + kBlock);
    __m256 p0 = _mm256_setzero_ps(), p1 = p0, p2 = p0, p3 = p0;
    for (; i + 32 <= block_end; i += 32) {
      p0 = _mm256_add_ps(p0, term(i, int64_t{8}));
      p1 = _mm256_add_ps(p1, term(i + 8, int64_t{8}));
      p2 = _mm256_add_ps(p2, term(i + 16, int64_t{8}));
      p3 = _mm256_add_ps(p3, term(i + 24, int64_t{8}));
    }
    for (; i < block_end; i += 8) p0 = _mm256_add_ps(p0, term(i, n - i));
    const __m256 p = _mm256_add_ps(_mm256_add_ps(p0, p1), _mm256_add_ps(p2, p3));
    total = _mm256_add_pd(total, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
    total = _mm256_add_pd(total, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
  }
  return hsumDouble(total);
}

// exp(x), Cephes expf: x = n*ln2 + r with |r| <= ln2/2, a degree-6 polynomial for
// exp(r), then a scale by 2^n done as two multiplications by 2^(n/2) so that results
// in the denormal range round once, correctly. Overflow gives +inf, x <= -104 gives 0,
// NaN stays NaN.
// Lanes at x <= -104 (a masked attention score is -inf) compute exp(0) and are zeroed at
// the end: exp(-104) rounds to 0 anyway, and computing it underflows, which costs a
// microcode assist per instruction on Intel cores (a causal softmax ran 4x slower).
inline __m256 vexp(__m256 x) {
  const __m256 zero = _mm256_cmp_ps(x, _mm256_set1_ps(-104.0f), _CMP_LE_OQ);
  x = _mm256_andnot_ps(zero, x);
  // min/max return their second operand when either is NaN: keep x second.
  x = _mm256_max_ps(_mm256_set1_ps(-104.0f), _mm256_min_ps(_mm256_set1_ps(88.8f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 split in two so that n*C1 is exact and r keeps full precision.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i ni = _mm256_cvtps_epi32(n);  // NaN gives garbage here, but p is NaN
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_andnot_ps(zero, _mm256_mul_ps(_mm256_mul_ps(p, s1), s2));
}

// log(x), Cephes logf: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), a polynomial in
// m - 1 (exact by Sterbenz), and e*ln2 added in two parts. Denormal inputs are scaled
// up first; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf.
inline __m256 vlog(__m256 x) {
  const __m256 denormal =
      _mm256_cmp_ps(x, _mm256_set1_ps(std::numeric_limits<float>::min()), _CMP_LT_OQ);
  const __m256 xs = _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(8388608.0f)), denormal);
  const __m256 e_adjust = _mm256_and_ps(denormal, _mm256_set1_ps(-23.0f));
  const __m256i bits = _mm256_castps_si256(xs);
  __m256 e = _mm256_cvtepi32_ps(
      _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(126)));
  e = _mm256_add_ps(e, e_adjust);
  // Mantissa in [0.5, 1).
  __m256 m = _mm256_castsi256_ps(_mm256_or_si256(
      _mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f000000)));
  const __m256 small = _mm256_cmp_ps(m, _mm256_set1_ps(0.707106781186547524f), _CMP_LT_OQ);
  e = _mm256_sub_ps(e, _mm256_and_ps(small, _mm256_set1_ps(1.0f)));
  const __m256 f = _mm256_sub_ps(_mm256_add_ps(m, _mm256_and_ps(small, m)), _mm256_set1_ps(1.0f));
  const __m256 z = _mm256_mul_ps(f, f);
  __m256 p = _mm256_set1_ps(7.0376836292e-2f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(-1.1514610310e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.1676998740e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(-1.2420140846e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.4249322787e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(-1.6668057665e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.0000714765e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(-2.4999993993e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(3.3333331174e-1f));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, f), z);
  y = _mm256_fmadd_ps(e, _mm256_set1_ps(-2.12194440e-4f), y);
  y = _mm256_fnmadd_ps(z, _mm256_set1_ps(0.5f), y);
  __m256 r = _mm256_add_ps(f, y);
  r = _mm256_fmadd_ps(e, _mm256_set1_ps(0.693359375f), r);
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  r = _mm256_blendv_ps(r, inf, _mm256_cmp_ps(x, inf, _CMP_EQ_OQ));
  r = _mm256_blendv_ps(r, _mm256_sub_ps(_mm256_setzero_ps(), inf),
                       _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ));
  // NaN for negative inputs and NaN inputs (NGE_UQ is true for both).
  return _mm256_blendv_ps(r, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()),
                          _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NGE_UQ));
}

// tanh(x), Cephes tanhf: an odd polynomial below |x| = 0.625, where 1 - 2/(e^2x + 1)
// would cancel, and that formula above it (exp overflow gives exactly +-1).
inline __m256 vtanh(__m256 x) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 ax = _mm256_andnot_ps(sign_bit, x);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
  const __m256 small_result = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
  const __m256 e = vexp(_mm256_add_ps(ax, ax));
  __m256 large = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                               _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
  const __m256 r = _mm256_blendv_ps(large, small_result, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
  // tanh is odd: copy x's sign (which also makes tanh(-0) = -0).
  return _mm256_or_ps(_mm256_andnot_ps(sign_bit, r), _mm256_and_ps(sign_bit, x));
}

// The tanh approximation of gelu. torch computes 0.5*x*(1 + tanh(u)); since
// 1 + tanh(u) = 2*sigmoid(2u), this is x / (1 + exp(-2u)), which has no cancellation
// for negative x (torch's form loses all relative precision below x ~ -4).
inline constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float kGeluKappa = 0.044715f;

inline __m256 vgelu(__m256 x) {
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 inner = _mm256_mul_ps(
      _mm256_mul_ps(x, _mm256_set1_ps(-2.0f * kGeluBeta)),
      _mm256_fmadd_ps(x2, _mm256_set1_ps(kGeluKappa), _mm256_set1_ps(1.0f)));
  const __m256 e = vexp(inner);
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// d gelu / dx = 0.5(1 + t) + 0.5 x (1 - t^2) u'  with t = tanh(u), u' = beta(1 + 3 kappa x^2).
// With s = sigmoid(2u): 1 + t = 2s and 1 - t^2 = 4 s (1 - s), so the derivative is
// s * (1 + 2 x (1 - s) u'). The exponent is capped at 88 so that 1 + e stays finite
// (an infinite e would make (1 - s) = inf/inf); the cap only changes results that are
// already below 1e-30.
inline __m256 vgeluGrad(__m256 x) {
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 arg = _mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(-2.0f * kGeluBeta)),
                             _mm256_fmadd_ps(x2, _mm256_set1_ps(kGeluKappa), one));
  arg = _mm256_min_ps(_mm256_set1_ps(88.0f), arg);
  const __m256 e = vexp(arg);
  const __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, e));
  const __m256 one_minus_s = _mm256_mul_ps(e, s);
  const __m256 du = _mm256_mul_ps(_mm256_set1_ps(2.0f * kGeluBeta),
                                  _mm256_fmadd_ps(x2, _mm256_set1_ps(3.0f * kGeluKappa), one));
  return _mm256_mul_ps(s, _mm256_fmadd_ps(_mm256_mul_ps(x, one_minus_s), du, one));
}

// sigmoid(x) = 1 / (1 + exp(-x)); exp overflow gives exactly 0.
inline __m256 vsigmoid(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, vexp(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

// silu(x) = x / (1 + exp(-x)), one rounding fewer than x * sigmoid(x).
inline __m256 vsilu(__m256 x) {
  const __m256 e = vexp(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// d silu / dx = s (1 + x (1 - s)) with s = sigmoid(x) and 1 - s = e s, e = exp(-x). The
// exponent is capped at 88 (as in vgeluGrad) so that e s never becomes inf * 0.
inline __m256 vsiluGrad(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = vexp(_mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_sub_ps(_mm256_setzero_ps(), x)));
  const __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, e));
  return _mm256_mul_ps(s, _mm256_fmadd_ps(x, _mm256_mul_ps(e, s), one));
}

// erf(x): the odd/even rational approximation on [-4, 4] that Eigen and XLA use (erf
// is +-1 in f32 beyond). <= 3.4e-7 relative error; keeps full relative accuracy near 0.
inline __m256 verf(__m256 x) {
  // min/max return their second operand when either is NaN: keep x second.
  x = _mm256_max_ps(_mm256_set1_ps(-4.0f), _mm256_min_ps(_mm256_set1_ps(4.0f), x));
  const __m256 x2 = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-2.72614225801306e-10f);
  p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(2.77068142495902e-08f));
  p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-2.10102402082508e-06f));
  p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-5.69250639462346e-05f));
  p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-7.34990630326855e-04f));
  p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-2.95459980854025e-03f));
  p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-1.60960333262415e-02f));
  __m256 q = _mm256_set1_ps(-1.45660718464996e-05f);
  q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(-2.13374055278905e-04f));
  q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(-1.68282697438203e-03f));
  q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(-7.37332916720468e-03f));
  q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(-1.42647390514189e-02f));
  return _mm256_div_ps(_mm256_mul_ps(x, p), q);
}

// erfc(z) for z >= 0 as t exp(-z^2 + P(t)), t = 1 / (1 + z/2): the Chebyshev fit of
// Numerical Recipes (erfcc), 1.2e-7 relative error for every z >= 0, so the tail keeps
// its relative accuracy where 1 - erf(z) would cancel. z^2 is split (fma) so that its
// rounding does not enter the exponent. z is capped at 10.5, where exp underflows to
// 0, so that z = inf gives 0 rather than NaN.
inline __m256 verfcPositive(__m256 z) {
  z = _mm256_min_ps(_mm256_set1_ps(10.5f), z);
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f),
                                 _mm256_fmadd_ps(z, _mm256_set1_ps(0.5f), _mm256_set1_ps(1.0f)));
  __m256 p = _mm256_set1_ps(0.17087277f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.82215223f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.48851587f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.13520398f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.27886807f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.18628806f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.09678418f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.37409196f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.00002368f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.26551223f));
  const __m256 zz = _mm256_mul_ps(z, z);
  const __m256 zz_lo = _mm256_fmsub_ps(z, z, zz);
  return _mm256_mul_ps(t, vexp(_mm256_sub_ps(_mm256_sub_ps(p, zz), zz_lo)));
}

// The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2, from the erfc of |x| so that
// the lower tail (negative x) keeps its relative accuracy.
inline __m256 vnormalCdf(__m256 x) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 half_tail = _mm256_mul_ps(
      _mm256_set1_ps(0.5f),
      verfcPositive(_mm256_mul_ps(_mm256_andnot_ps(sign_bit, x), _mm256_set1_ps(0.70710678118654752f))));
  const __m256 negative = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  return _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), half_tail), half_tail, negative);
}

// The exact gelu x Phi(x) (torch's default nn.GELU), written through Phi rather than
// 0.5 x (1 + erf(x / sqrt 2)), which loses all relative precision below x ~ -5.
inline __m256 vgeluErf(__m256 x) { return _mm256_mul_ps(x, vnormalCdf(x)); }

// d gelu_erf / dx = Phi(x) + x phi(x), phi the standard normal density.
inline __m256 vgeluErfGrad(__m256 x) {
  const __m256 pdf = _mm256_mul_ps(
      _mm256_set1_ps(0.39894228040143268f),  // 1 / sqrt(2 pi)
      vexp(_mm256_mul_ps(_mm256_set1_ps(-0.5f), _mm256_mul_ps(x, x))));
  return _mm256_fmadd_ps(x, pdf, vnormalCdf(x));
}

}  // namespace pgq::kernels::vec
