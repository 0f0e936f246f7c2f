#include "kernels/quant_stats.h"

#include <cmath>
#include <vector>

#include "kernels/emulated_forms.h"
#include "kernels/float_quant.h"
#include "kernels/float_quant_core.h"
#include "kernels/quant_core.h"
#include "kernels/stats_sink.h"

namespace pgq::kernels {
namespace {

using detail::Partial;
using detail::StatsSink;

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

}  // namespace

namespace detail {

Partial unitStatsOf(const QuantPlan& plan, int64_t unit, const float* x, const QuantFormat& format,
                    SrStream sr, bool wide, bool count_clipped) {
  if (wide)
    return count_clipped ? unitStats<true, true>(plan, unit, x, format, sr) : unitStats<true, false>(plan, unit, x, format, sr);
  return count_clipped ? unitStats<false, true>(plan, unit, x, format, sr) : unitStats<false, false>(plan, unit, x, format, sr);
}

QuantStats combinePartials(const std::vector<Partial>& partials, const OperandView& view) {
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

}  // namespace detail

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
  const bool count_clipped = !params_from_x || !detail::clippingIsImpossible(format);
#pragma omp parallel for schedule(static)
  for (int64_t unit = 0; unit < plan.units(); ++unit) {
    Partial p = detail::unitStatsOf(plan, unit, x.data(), format, sr, /*wide=*/false, count_clipped);
    if (detail::needsWideSums(p)) {
      p = detail::unitStatsOf(plan, unit, x.data(), format, sr, /*wide=*/true, count_clipped);
    }
    partials[unit] = p;
  }
  return detail::combinePartials(partials, view);
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
