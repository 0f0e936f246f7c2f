#pragma once
// Sensitivity metrics: how much quantizing one GEMM is expected to hurt training, from
// the statistics stage (i) logged (plan/profile.h). SQNR measures the size of an input's
// error only; the others add what SQNR misses (docs/METRICS.md):
//
//   sqnr    min over the inputs of E[x^2] / E[e^2], e = Q(x) - x
//   bias    min over the inputs of E[x^2] / (E_rows[(sum_k e)^2] / K): the error as it
//           sums along the contracting dimension; = sqnr for unbiased (SR) noise
//   output  E[y^2] / E[(y_q - y)^2] of the GEMM's result, both inputs quantized
//   reach   sqnr / reach: reach is the fraction of the parameters whose gradient
//           depends on the GEMM's result (1 for forward GEMMs, the layers below for a
//           dgrad, its own weight for a wgrad)
//   effect  output / gradient_reach: the same weighted by each gradient's squared norm
//
// Each is an effective SQNR (a ratio; higher is safer), so thresholds, orderings and
// the adversarial twin work the same for all of them. The statistics beyond SQNR need
// `pgq train --profile-metrics` (effect also `--profile-outputs`); a profile without
// them is refused with the field and the flag named.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plan/profile.h"

namespace pgq {

enum class Metric {
#define GEMM_METRIC(id, name, help) k##id,
#include "plan/gemm_metrics.def"
};

std::string_view nameOf(Metric metric);
std::string_view helpOf(Metric metric);
std::optional<Metric> parseMetric(std::string_view name);
// Throws pgq::Error naming `what` (a flag or a file field) and listing the metrics.
Metric metricFromName(std::string_view name, std::string_view what);
std::vector<Metric> allMetrics();
// "sqnr, bias, output, reach, effect"
std::string metricNames();

struct MetricValue {
  double value = 0;
  bool estimated = false;  // a format the profile did not measure, derived from another
};

// Throws pgq::Error unless `profile` holds the statistics `metric` needs, naming the
// metric, the missing field and the profiling flag that records it.
void requireMetric(const Profile& profile, Metric metric, const std::string& profile_path);
bool hasMetric(const Profile& profile, Metric metric);

// The default ordering metric of backward GEMMs: `effect`, which ordered them closest to
// the Pareto estimate and beat SQNR in every setting measured (docs/RESULTS.md, "Beyond
// SQNR"), when the profile holds its statistics (pgq train --profile-metrics
// --profile-outputs; pgq experiment records them unless --no-profile-metrics); SQNR
// otherwise. Forward GEMMs compare SQNR by default: there `effect` is the output SQNR,
// which ordered them worse than random (it ranks the logits first).
inline constexpr Metric kDefaultMetric = Metric::kEffect;
Metric defaultMetric(const Profile& profile);

// The metric of GEMM `g` quantized with formats lhs x rhs, given their (possibly
// estimated) input SQNRs. Throws pgq::Error naming the profile, the GEMM, the metric
// and the missing field, with the flag that records it.
MetricValue metricOf(Metric metric, const GemmProfile& g, const QuantFormat& lhs_format, const QuantFormat& rhs_format,
                     double sqnr_lhs, double sqnr_rhs, const std::string& profile_path);

}  // namespace pgq
