#include "kernels/quant_clip.h"

#include <algorithm>
#include <cmath>

#include "kernels/quant_core.h"

namespace pgq::kernels {
namespace {

// Accumulates the squared dequantization error of the real lanes.
struct MseSink {
  __m256d sum = _mm256_setzero_pd();
  void operator()(int64_t, const detail::Lanes& l, int valid) {
    for (int k = 0; k < 4; ++k) {
      __m256 err =
          _mm256_sub_ps(_mm256_mul_ps(_mm256_sub_ps(l.t[k], l.add[k]), l.scale[k]), l.x[k]);
      if (valid < 32) err = _mm256_and_ps(err, detail::validMask(valid, k));
      __m256d e0 = _mm256_cvtps_pd(_mm256_castps256_ps128(err));
      __m256d e1 = _mm256_cvtps_pd(_mm256_extractf128_ps(err, 1));
      sum = _mm256_fmadd_pd(e0, e0, _mm256_fmadd_pd(e1, e1, sum));
    }
  }
  double total() const {
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, sum);
    return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  }
};

// Nearest-rank percentile index of n sorted values.
size_t percentileRank(size_t n, double percentile) {
  double rank = std::ceil(percentile / 100.0 * double(n)) - 1.0;
  return size_t(std::clamp(rank, 0.0, double(n - 1)));
}

}  // namespace

double groupMse(std::span<const float> values, float scale, float zero_point,
                const QuantFormat& format) {
  if (values.empty()) return 0.0;
  QuantGrid grid = gridOf(format);
  float inv = 1.0f / scale;
  detail::RunParams p{&inv, &zero_point, &scale};
  MseSink sink;
  detail::processRun<false, false>(values.data(), 0, int64_t(values.size()), p, grid.lo, grid.hi,
                                   nullptr, sink);
  return sink.total() / double(values.size());
}

std::pair<double, double> clipRange(std::span<float> values, double lo, double hi,
                                    const QuantFormat& format) {
  if (values.empty() || format.clipping == Clipping::kNone) return {lo, hi};
  if (format.clipping == Clipping::kPercentile) {
    size_t upper = percentileRank(values.size(), format.percentile);
    if (!format.asymmetric) {
      for (float& v : values) v = std::fabs(v);
      std::nth_element(values.begin(), values.begin() + upper, values.end());
      return {-double(values[upper]), double(values[upper])};
    }
    size_t lower = values.size() - 1 - upper;
    std::nth_element(values.begin(), values.begin() + upper, values.end());
    double hi_clip = values[upper];
    std::nth_element(values.begin(), values.begin() + lower, values.end());
    double lo_clip = values[lower];
    return {std::min(lo_clip, 0.0), std::max(hi_clip, 0.0)};
  }
  // MSE search; the first (largest) ratio wins ties, so a group that clipping cannot
  // improve keeps its full range.
  double best_ratio = 1.0;
  double best_mse = INFINITY;
  for (int step = 0; step < kMseClipSteps; ++step) {
    double ratio = 1.0 - 0.02 * step;
    detail::GroupParams p = detail::paramsFromRange(lo * ratio, hi * ratio, format);
    double mse = groupMse(values, p.scale, p.zero_point, format);
    if (mse < best_mse) {
      best_mse = mse;
      best_ratio = ratio;
    }
  }
  return {lo * best_ratio, hi * best_ratio};
}

}  // namespace pgq::kernels
