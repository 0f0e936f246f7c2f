#include "plan/scaling_strategies.h"

#include <algorithm>
#include <cmath>

#include "support/errors.h"

namespace pgq {

double adamUpdateBound(double beta1, double beta2, int64_t step) {
  PGQ_ASSERT(step >= 1 && beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "adamUpdateBound({}, {}, {})", beta1,
             beta2, step);
  constexpr double kCap = 1e30;
  const double t = static_cast<double>(step);
  // beta2 = 0: v holds only the last gradient, so m / sqrt(v) is 1 without momentum and
  // unbounded with it.
  if (beta2 == 0) return beta1 == 0 ? 1.0 : kCap;
  const double r = beta1 * beta1 / beta2;
  const double sum = r == 1 ? t : std::expm1(t * std::log(r)) / (r - 1);  // sum_{j<t} r^j
  const double bound = std::sqrt(-std::expm1(t * std::log(beta2))) / (1 - std::pow(beta1, t)) * (1 - beta1) /
                       std::sqrt(1 - beta2) * std::sqrt(sum);
  return std::isfinite(bound) ? std::min(bound, kCap) : kCap;
}

ScalingStats scalingStats(std::span<const double> absmax, int64_t history, std::span<const WeightStepBound> updates) {
  const auto steps = static_cast<int64_t>(absmax.size());
  PGQ_ASSERT(steps >= 2 && history >= 1, "scaling statistics need 2 steps and a history, got {} and {}", steps,
             history);
  PGQ_ASSERT(updates.empty() || updates.size() == absmax.size(), "{} updates for {} steps", updates.size(), steps);
  ScalingStats s;
  s.steps = steps;
  s.delayed_history = std::min(history, steps - 1);
  // Over the steps t >= 1, which have a previous step to take a scale from.
  const double transitions = static_cast<double>(steps - 1);
  int64_t delayed_clips = 0;
  // A history whose amax is 0 keeps the scale before it (TE's _default_sf_compute, and
  // pgq's delayed-scale kernel): that of the last positive amax, or at first TE's unit
  // scale, whose range the statistics do not see (not counted as a clip).
  double kept = 0;
  for (int64_t t = 1; t < steps; ++t) {
    const auto first = absmax.begin() + std::max<int64_t>(0, t - history);
    const double amax = *std::max_element(first, absmax.begin() + t);
    if (amax > 0) kept = amax;
    const double x = absmax[static_cast<size_t>(t)];
    if (kept == 0 || x <= kept) continue;
    ++delayed_clips;
    s.delayed_worst_ratio = std::max(s.delayed_worst_ratio, x / kept);
  }
  s.delayed_clip_fraction = static_cast<double>(delayed_clips) / transitions;
  if (updates.empty()) return s;

  PredictedScaling p;
  int64_t clips = 0, rigorous_clips = 0, measured = 0;
  double overestimate_sum = 0, rigorous_sum = 0;
  for (size_t t = 1; t < absmax.size(); ++t) {
    const WeightStepBound& u = updates[t - 1];
    const double predicted = absmax[t - 1] + u.lr;
    const double rigorous = absmax[t - 1] + u.lr * u.rigorous_bound;
    const double x = absmax[t];
    if (x > predicted) {
      ++clips;
      if (predicted > 0) p.worst_ratio = std::max(p.worst_ratio, x / predicted);
    }
    if (x > rigorous) ++rigorous_clips;
    if (x > 0) {
      ++measured;
      overestimate_sum += predicted / x;
      rigorous_sum += rigorous / x;
    }
  }
  p.clip_fraction = static_cast<double>(clips) / transitions;
  p.rigorous_clip_fraction = static_cast<double>(rigorous_clips) / transitions;
  if (measured > 0) {
    p.overestimate = overestimate_sum / static_cast<double>(measured);
    p.rigorous_overestimate = rigorous_sum / static_cast<double>(measured);
  }
  s.predicted = p;
  return s;
}

}  // namespace pgq
