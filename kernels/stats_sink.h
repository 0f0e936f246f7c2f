#pragma once
// Internal to kernels/: the statistics pass's accumulators (one work unit's sums and
// counts), shared by quantStatsWithParams() and the pass that measures several formats
// in one walk (quant_stats_fused.cc), so that both add the same values in the same order.
// Not part of the public API.
#include <immintrin.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/quant_core.h"
#include "kernels/quant_stats.h"

namespace pgq::kernels::detail {

struct Partial {
  double signal = 0.0;
  double noise = 0.0;
  int64_t finite = 0;
  int64_t nan = 0;
  int64_t inf = 0;
  int64_t zeros = 0;
  int64_t underflow = 0;
  int64_t clipped = 0;
  float absmax = 0.0f;
};

// Whether a unit's float block sums cannot be trusted, so that it is summed again in
// double: a square overflowed (|x| > ~1e19), or the unit is so small (absmax < 2^-40)
// that its errors' squares near float's subnormals (below ~1e-38) and lose their digits
// (at 2^-70 an int8 SQNR came out 5e7 times too high). Normal units never pay for it.
inline bool needsWideSums(const Partial& p) {
  return !std::isfinite(p.signal) || !std::isfinite(p.noise) || (p.absmax > 0.0f && p.absmax < 0x1p-40f);
}

inline int64_t sumLanes(__m256i v) {
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  int64_t total = 0;
  for (int32_t lane : lanes) total += lane;
  return total;
}

inline double sumLanes(__m256d v) {
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, v);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// Accumulates one work unit. Counters are 32-bit lanes (a unit has at most
// QuantPlan::kUnitElements elements); masks are all-ones lanes, so subtracting one
// counts it. Squares are summed in float over each block of 32 elements and the block
// sums in double (kWide = false); a unit whose float sums overflow (|x| > ~1e19) or are
// too small for float (needsWideSums) is summed again entirely in double (kWide = true). kClipped = false leaves out the
// clipped count where it is known to be 0 (clippingIsImpossible).
// Most blocks are full and finite: one integer max of the four vectors' magnitudes tells
// (a float's magnitude bits order like the float, and NaN/Inf sit above every finite
// one), gives the block's absmax, and lets the block skip every finiteness mask and
// count. The other blocks (a non-finite lane, or padding) take the masked path. Both
// paths add the same values in the same order: the sums do not depend on the split.
template <bool kWide, bool kClipped>
struct StatsSink {
  __m256d signal = _mm256_setzero_pd();
  __m256d noise = _mm256_setzero_pd();
  __m256i masked_finite = _mm256_setzero_si256();  // finite lanes of masked blocks
  int64_t fast_finite = 0;                          // elements of full finite blocks
  __m256i nan = _mm256_setzero_si256();
  __m256i zeros = _mm256_setzero_si256();       // masked blocks
  // Full finite blocks count every Q(x) = 0 as underflow, x = 0 included (x = 0 gives
  // t = add on every grid), and their zeros here; result() takes those off.
  __m256i fast_zeros = _mm256_setzero_si256();
  __m256i underflow = _mm256_setzero_si256();
  __m256i clipped = _mm256_setzero_si256();
  __m256 absmax = _mm256_setzero_ps();      // masked blocks
  __m256i absmax_bits = _mm256_setzero_si256();  // full finite blocks, as magnitude bits
  int64_t real = 0;
  __m256 lo_edge;
  __m256 hi_edge;

  // A value v = x * inv + add below lo_edge or above hi_edge counts as clipped.
  StatsSink(float lo, float hi) : lo_edge(_mm256_set1_ps(lo)), hi_edge(_mm256_set1_ps(hi)) {}
  // For sinks that count no clipped values.
  StatsSink() : StatsSink(0.0f, 0.0f) {}

  static void count(__m256i& counter, __m256 mask) {
    counter = _mm256_sub_epi32(counter, _mm256_castps_si256(mask));
  }

  static void addSquares(__m256d& sum, __m256 v) {
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    sum = _mm256_fmadd_pd(lo, lo, _mm256_fmadd_pd(hi, hi, sum));
  }

  static void addBlock(__m256d& sum, __m256 v) {
    sum = _mm256_add_pd(sum, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                                           _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
  }

  // One vector's counts and squares; `fin` (finite real lanes) is applied only when kMasked.
  template <bool kMasked>
  __attribute__((always_inline)) void lanes(const detail::Lanes& l, int k, __m256 fin, __m256 is_zero,
                                            __m256& block_signal, __m256& block_noise) {
    const __m256 x = l.x[k];
    // Q(x) = 0 exactly when the grid integer equals the zero point.
    const __m256 on_zero = _mm256_cmp_ps(l.t[k], l.add[k], _CMP_EQ_OQ);
    if constexpr (kMasked) {
      count(zeros, is_zero);
      count(underflow, _mm256_and_ps(_mm256_andnot_ps(is_zero, on_zero), fin));
    } else {
      count(fast_zeros, is_zero);
      count(underflow, on_zero);
    }
    if constexpr (kClipped) {
      const __m256 v = _mm256_add_ps(_mm256_mul_ps(x, l.inv[k]), l.add[k]);
      __m256 out = _mm256_or_ps(_mm256_cmp_ps(v, hi_edge, _CMP_GT_OQ), _mm256_cmp_ps(v, lo_edge, _CMP_LT_OQ));
      if constexpr (kMasked) out = _mm256_and_ps(out, fin);
      count(clipped, out);
    }
    const __m256 xf = kMasked ? _mm256_and_ps(x, fin) : x;
    // Q(x) - x = (t - add) * scale - x rounded once: an explicit fused multiply-subtract,
    // which an optimizing build would contract to anyway, so that the sums do not depend
    // on the optimization level (and the many-format pass, quant_stats_fused.cc, adds
    // the same errors in every build).
    __m256 err = _mm256_fmsub_ps(_mm256_sub_ps(l.t[k], l.add[k]), l.scale[k], x);
    if constexpr (kMasked) err = _mm256_and_ps(err, fin);
    if constexpr (kWide) {
      addSquares(signal, xf);
      addSquares(noise, err);
    } else {
      block_signal = _mm256_fmadd_ps(xf, xf, block_signal);
      block_noise = _mm256_fmadd_ps(err, err, block_noise);
    }
  }

  // Inlined into the quantizer's loop, so that the lanes stay in registers (a call
  // passes all 24 vectors through memory).
  __attribute__((always_inline)) void operator()(int64_t, const detail::Lanes& l, int valid) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 zero = _mm256_setzero_ps();
    real += valid;
    __m256 block_signal = zero;
    __m256 block_noise = zero;
    if (valid == 32) {
      __m256i ax[4];
      for (int k = 0; k < 4; ++k) ax[k] = _mm256_castps_si256(_mm256_and_ps(l.x[k], abs_mask));
      const __m256i top = _mm256_max_epi32(_mm256_max_epi32(ax[0], ax[1]), _mm256_max_epi32(ax[2], ax[3]));
      const __m256i nonfinite = _mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x7F7FFFFF));
      if (__builtin_expect(_mm256_testz_si256(nonfinite, nonfinite), 1)) {
        fast_finite += 32;
        absmax_bits = _mm256_max_epi32(absmax_bits, top);
        // x = +-0 where its magnitude bits are 0: an integer compare, which Zen 3 runs on
        // any of its four vector pipes (float compares share two with the multiplies).
        for (int k = 0; k < 4; ++k)
          lanes<false>(l, k, zero, _mm256_castsi256_ps(_mm256_cmpeq_epi32(ax[k], _mm256_setzero_si256())),
                       block_signal, block_noise);
        if constexpr (!kWide) {
          addBlock(signal, block_signal);
          addBlock(noise, block_noise);
        }
        return;
      }
    }
    masked(l, valid);
  }

  // A block with a non-finite lane or padding: every count and sum masked.
  __attribute__((always_inline)) void masked(const detail::Lanes& l, int valid) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 zero = _mm256_setzero_ps();
    __m256 block_signal = zero;
    __m256 block_noise = zero;
    for (int k = 0; k < 4; ++k) {
      const __m256 ax = _mm256_and_ps(l.x[k], abs_mask);
      // Padding lanes hold x = 0: only the finite and zero masks need the lane mask,
      // everything else is gated by `fin` or is 0 there.
      __m256 fin = _mm256_cmp_ps(ax, _mm256_set1_ps(FLT_MAX), _CMP_LE_OQ);
      __m256 is_zero = _mm256_cmp_ps(l.x[k], zero, _CMP_EQ_OQ);
      if (valid != 32) {
        const __m256 lane = detail::validMask(valid, k);
        fin = _mm256_and_ps(fin, lane);
        is_zero = _mm256_and_ps(is_zero, lane);
      }
      count(masked_finite, fin);
      absmax = _mm256_max_ps(absmax, _mm256_and_ps(ax, fin));
      lanes<true>(l, k, fin, is_zero, block_signal, block_noise);
      // Padding lanes (x = 0) are not finite here, and not NaN either.
      count(nan, _mm256_cmp_ps(l.x[k], l.x[k], _CMP_UNORD_Q));
    }
    if constexpr (!kWide) {
      addBlock(signal, block_signal);
      addBlock(noise, block_noise);
    }
  }

  Partial result() const {
    Partial p;
    p.signal = sumLanes(signal);
    p.noise = sumLanes(noise);
    p.finite = sumLanes(masked_finite) + fast_finite;
    p.nan = sumLanes(nan);
    p.inf = real - p.finite - p.nan;
    p.zeros = sumLanes(zeros) + sumLanes(fast_zeros);
    p.underflow = sumLanes(underflow) - sumLanes(fast_zeros);
    p.clipped = sumLanes(clipped);
    // Finite magnitudes' bits order like the floats.
    const __m256 both = _mm256_max_ps(absmax, _mm256_castsi256_ps(absmax_bits));
    alignas(32) float values[8];
    _mm256_store_ps(values, both);
    for (float lane : values) p.absmax = std::max(p.absmax, lane);
    return p;
  }
};

// Whether no value can land beyond the grid by more than half a step when the scales
// come from x itself (computeQuantParams): f32 scales put each group's absmax on the
// grid's end (up to a few ulp, far below half a step), and so do two-level scales (a
// power of two at or above the group's absmax / max); a zero point moves an end by at
// most half a step. Clipping, E8M0 and E4M3 scales (rounded down) can clip; bf16 rounds
// its largest floats to Inf.
inline bool clippingIsImpossible(const QuantFormat& format) {
  return format.clipping == Clipping::kNone && format.element != Element::kBf16 &&
         (format.scale == ScaleKind::kF32 || format.scale == ScaleKind::kTwoLevel);
}

// One work unit of quantStatsWithParams(): the unit's sums in `format` (params in `plan`).
// wide: every square summed in double (for a unit whose float block sums overflowed).
Partial unitStatsOf(const QuantPlan& plan, int64_t unit, const float* x, const QuantFormat& format,
                    SrStream sr, bool wide, bool count_clipped);

// The statistics from the units' sums, added in unit order.
QuantStats combinePartials(const std::vector<Partial>& partials, const OperandView& view);

}  // namespace pgq::kernels::detail
