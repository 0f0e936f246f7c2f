#include "kernels/quant_stats.h"

#include <cmath>
#include <vector>

#include "kernels/emulated_forms.h"
#include "kernels/float_quant.h"
#include "kernels/float_quant_core.h"
#include "kernels/quant_core.h"

namespace pgq::kernels {
namespace {

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

int64_t sumLanes(__m256i v) {
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  int64_t total = 0;
  for (int32_t lane : lanes) total += lane;
  return total;
}

double sumLanes(__m256d v) {
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, v);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// Accumulates one work unit. Counters are 32-bit lanes (a unit has at most
// QuantPlan::kUnitElements elements); masks are all-ones lanes, so subtracting one
// counts it. Squares are summed in float over each block of 32 elements and the block
// sums in double (kWide = false); a unit whose float sums overflow (|x| > ~1e19) is
// summed again entirely in double (kWide = true). kClipped = false leaves out the
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
  __m256i zeros = _mm256_setzero_si256();
  __m256i underflow = _mm256_setzero_si256();
  __m256i clipped = _mm256_setzero_si256();
  __m256 absmax = _mm256_setzero_ps();      // masked blocks
  __m256i absmax_bits = _mm256_setzero_si256();  // full finite blocks, as magnitude bits
  int64_t real = 0;
  __m256 lo_edge;
  __m256 hi_edge;

  // A value v = x * inv + add below lo_edge or above hi_edge counts as clipped.
  StatsSink(float lo, float hi) : lo_edge(_mm256_set1_ps(lo)), hi_edge(_mm256_set1_ps(hi)) {}

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
    count(zeros, is_zero);
    // Q(x) = 0 exactly when the grid integer equals the zero point.
    const __m256 on_zero = _mm256_cmp_ps(l.t[k], l.add[k], _CMP_EQ_OQ);
    __m256 under = _mm256_andnot_ps(is_zero, on_zero);
    if constexpr (kMasked) under = _mm256_and_ps(under, fin);
    count(underflow, under);
    if constexpr (kClipped) {
      const __m256 v = _mm256_add_ps(_mm256_mul_ps(x, l.inv[k]), l.add[k]);
      __m256 out = _mm256_or_ps(_mm256_cmp_ps(v, hi_edge, _CMP_GT_OQ), _mm256_cmp_ps(v, lo_edge, _CMP_LT_OQ));
      if constexpr (kMasked) out = _mm256_and_ps(out, fin);
      count(clipped, out);
    }
    const __m256 xf = kMasked ? _mm256_and_ps(x, fin) : x;
    const __m256 deq = _mm256_mul_ps(_mm256_sub_ps(l.t[k], l.add[k]), l.scale[k]);
    __m256 err = _mm256_sub_ps(deq, x);
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
        for (int k = 0; k < 4; ++k)
          lanes<false>(l, k, zero, _mm256_cmp_ps(l.x[k], zero, _CMP_EQ_OQ), block_signal, block_noise);
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
    p.zeros = sumLanes(zeros);
    p.underflow = sumLanes(underflow);
    p.clipped = sumLanes(clipped);
    // Finite magnitudes' bits order like the floats.
    const __m256 both = _mm256_max_ps(absmax, _mm256_castsi256_ps(absmax_bits));
    alignas(32) float values[8];
    _mm256_store_ps(values, both);
    for (float lane : values) p.absmax = std::max(p.absmax, lane);
    return p;
  }
};

// One work unit with the arithmetic of quantize() (integer grids with f32 scales; clipped
// beyond the grid by more than half a step) or of fakeQuantize() (emulated formats; the
// lanes' t is the element value, add 0, and clipped is beyond the element max by more
// than half the step there: values that saturation moved).
template <bool kWide, bool kClipped>
Partial unitStats(const detail::QuantPlan& plan, int64_t unit, const float* x,
                  const QuantFormat& format, SrStream sr) {
  detail::SrState sr_state(sr);
  const bool stochastic = format.rounding == Rounding::kStochastic;
  if (format.isEmulated()) {
    const detail::EmulatedGrid grid = detail::emulatedGridOf(format);
    const detail::GridLanes lanes(grid);
    StatsSink<kWide, kClipped> sink(-grid.clip_edge, grid.clip_edge);
    plan.forEachRun(
        unit,
        [&](int64_t index, int64_t len, detail::RunParams p, bool per_elem) {
          detail::emulatedRunAny(stochastic, grid.kind, per_elem, x + index, index, len, p,
                                 lanes, &sr_state, sink);
        },
        /*rows_at_once=*/true, /*blocks_at_once=*/true);
    return sink.result();
  }
  StatsSink<kWide, kClipped> sink(float(plan.lo()) - 0.5f, float(plan.hi()) + 0.5f);
  plan.forEachRun(unit, [&](int64_t index, int64_t len, detail::RunParams p, bool per_elem) {
    detail::processRunAny(stochastic, per_elem, x + index, index, len, p, plan.lo(), plan.hi(),
                          &sr_state, sink);
  });
  return sink.result();
}

// Whether no value can land beyond the grid by more than half a step when the scales
// come from x itself (computeQuantParams): f32 scales put each group's absmax on the
// grid's end (up to a few ulp, far below half a step), and so do two-level scales (a
// power of two at or above the group's absmax / max); a zero point moves an end by at
// most half a step. Clipping, E8M0 and E4M3 scales (rounded down) can clip; bf16 rounds
// its largest floats to Inf.
bool clippingIsImpossible(const QuantFormat& format) {
  return format.clipping == Clipping::kNone && format.element != Element::kBf16 &&
         (format.scale == ScaleKind::kF32 || format.scale == ScaleKind::kTwoLevel);
}

template <bool kWide>
Partial unitStatsAny(bool clipped, const detail::QuantPlan& plan, int64_t unit, const float* x,
                     const QuantFormat& format, SrStream sr) {
  return clipped ? unitStats<kWide, true>(plan, unit, x, format, sr) : unitStats<kWide, false>(plan, unit, x, format, sr);
}

}  // namespace

double sqnrDb(double sqnr) { return 10.0 * std::log10(sqnr); }

QuantStats quantStatsWithParams(std::span<const float> x, const OperandView& view,
                                const QuantFormat& format, std::span<const float> params,
                                SrStream sr, bool params_from_x) {
  detail::checkQuantArgs("quantStats", int64_t(x.size()), view, format, int64_t(params.size()));
  if (format.isEmulated()) {
    detail::checkEmulatedParams("quantStats", format, params, quantGroupCount(view, format));
  }
  // The transform is orthogonal along every row's contracting blocks, so the error of
  // Q(H D x) against H D x is that of the value the GEMM reads against x.
  if (format.hadamard)
    return quantStatsWithParams(detail::hadamardCopy(x, view, sr.offset), view, detail::rowFormat(format),
                                format.block2d ? detail::expandTileParams(view, format, params)
                                               : std::vector<float>(params.begin(), params.end()),
                                sr, params_from_x);
  if (format.block2d)
    return quantStatsWithParams(x, view, detail::rowFormat(format), detail::expandTileParams(view, format, params), sr,
                                params_from_x);
  const detail::QuantPlan plan = format.isEmulated() ? detail::emulatedPlan(view, format, params)
                                                     : detail::QuantPlan(view, format, params, 0);
  std::vector<Partial> partials(plan.units());
  const bool count_clipped = !params_from_x || !clippingIsImpossible(format);
#pragma omp parallel for schedule(static)
  for (int64_t unit = 0; unit < plan.units(); ++unit) {
    Partial p = unitStatsAny<false>(count_clipped, plan, unit, x.data(), format, sr);
    if (!std::isfinite(p.signal) || !std::isfinite(p.noise)) {
      p = unitStatsAny<true>(count_clipped, plan, unit, x.data(), format, sr);
    }
    partials[unit] = p;
  }
  Partial total;
  for (const Partial& p : partials) {
    total.signal += p.signal;
    total.noise += p.noise;
    total.finite += p.finite;
    total.nan += p.nan;
    total.inf += p.inf;
    total.zeros += p.zeros;
    total.underflow += p.underflow;
    total.clipped += p.clipped;
    total.absmax = std::max(total.absmax, p.absmax);
  }
  QuantStats stats;
  stats.count = view.elements();
  stats.finite_count = total.finite;
  stats.nan_count = total.nan;
  stats.inf_count = total.inf;
  stats.absmax = total.absmax;
  if (total.finite > 0) {
    const double n = double(total.finite);
    stats.mean_square = total.signal / n;
    stats.mse = total.noise / n;
    stats.zero_fraction = double(total.zeros) / n;
    stats.underflow_fraction = double(total.underflow) / n;
    stats.clipped_fraction = double(total.clipped) / n;
  }
  // noise is a sum of squares: 0, positive, or +inf (never NaN: every term is finite or
  // +inf). signal / noise is then finite, +inf or 0, and the cap handles +inf.
  stats.sqnr = total.noise > 0.0 ? std::min(total.signal / total.noise, kSqnrCap) : kSqnrCap;
  return stats;
}

double coherentErrorMeanSquare(std::span<const float> x, const OperandView& view, const QuantFormat& format,
                               std::span<const float> params, SrStream sr) {
  detail::checkQuantArgs("coherentErrorMeanSquare", int64_t(x.size()), view, format, int64_t(params.size()));
  // Q(x) through the quantizers themselves (one more pass and a buffer, only in profiled
  // steps), so that the error is the one the statistics and the GEMMs see.
  std::vector<float> q(x.size());
  if (format.isEmulated()) {
    fakeQuantize(x, view, format, params, q, sr);
  } else {
    std::vector<uint8_t> stored(x.size());
    quantize(x, view, format, params, std::span<uint8_t>(stored), sr);
    dequantize(std::span<const uint8_t>(stored), view, format, params, q);
  }
  // The error in double (exact for two finite floats); a non-finite element or result
  // makes d - d NaN, and counts as no error. Branch-free, so that the loops vectorize.
  auto error = [](float value, float quantized) {
    const double d = double(quantized) - double(value);
    return d - d == 0.0 ? d : 0.0;
  };
  const int64_t channels = view.channels(), k = view.contractLength();
  // One sum per (batch, channel), each accumulated in an order fixed by the shape alone,
  // then added in index order: the result does not depend on the thread count.
  std::vector<double> sums(static_cast<size_t>(view.batch * channels), 0.0);
  const float* xs = x.data();
  const float* qs = q.data();
  if (view.contract_along_cols) {
    // Each row's sum in 8 interleaved partial sums (vector lanes), then those in order.
    constexpr int64_t kLanes = 8;
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < view.batch * view.rows; ++row) {
      const float* xr = xs + row * view.cols;
      const float* qr = qs + row * view.cols;
      double lanes[kLanes] = {};
      int64_t c = 0;
      for (; c + kLanes <= view.cols; c += kLanes)
        for (int64_t l = 0; l < kLanes; ++l) lanes[l] += error(xr[c + l], qr[c + l]);
      double s = 0.0;
      for (; c < view.cols; ++c) s += error(xr[c], qr[c]);
      for (double lane : lanes) s += lane;
      sums[static_cast<size_t>(row)] = s;
    }
  } else {
    // Contracting along the rows: every column's sum runs down the rows. A block of
    // columns per task, its rows read in order (contiguous), one sum per column.
    constexpr int64_t kBlock = 256;
    const int64_t blocks = (view.cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int64_t task = 0; task < view.batch * blocks; ++task) {
      const int64_t b = task / blocks, c0 = (task % blocks) * kBlock, c1 = std::min(view.cols, c0 + kBlock);
      double* out = sums.data() + b * view.cols;
      for (int64_t r = 0; r < view.rows; ++r) {
        const float* xr = xs + (b * view.rows + r) * view.cols;
        const float* qr = qs + (b * view.rows + r) * view.cols;
        for (int64_t c = c0; c < c1; ++c) out[c] += error(xr[c], qr[c]);
      }
    }
  }
  double total = 0.0;
  for (double s : sums) total += s * s;
  return total / double(k) / double(sums.size());
}

QuantStats quantStats(std::span<const float> x, const OperandView& view, const QuantFormat& format,
                      SrStream sr) {
  view.validate();
  checkFormat(format);
  std::vector<float> params(quantParamCount(view, format));
  computeQuantParams(x, view, format, params, sr);
  return quantStatsWithParams(x, view, format, params, sr, /*params_from_x=*/true);
}

}  // namespace pgq::kernels
