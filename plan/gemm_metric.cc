#include "plan/gemm_metric.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/errors.h"
#include "support/quant_format.h"

namespace pgq {
namespace {

struct MetricInfo {
  std::string_view name, help;
};
constexpr std::array kMetrics = {
#define GEMM_METRIC(id, name, help) MetricInfo{name, help},
#include "plan/gemm_metrics.def"
};

// A reach below this counts as this: a GEMM whose result reaches (almost) nothing is
// still not free to quantize, and the ratio stays finite.
constexpr double kMinReach = 1e-6;

// The integer formats `a` and `b` equal but for their bits: the statistics of one stand
// for the other with SQNR scaled by 4 per bit (the CPU's 7-bit side of an 8-bit recipe).
std::optional<int> bitsApart(const QuantFormat& a, QuantFormat b) {
  if (a.isFloat() || b.isFloat()) return std::nullopt;
  int apart = a.bits - b.bits;
  b.bits = a.bits;
  return a == b ? std::optional<int>(apart) : std::nullopt;
}

std::string missing(Metric metric, const GemmProfile& g, const std::string& what, const std::string& path,
                    const std::string& flag) {
  return fmt::format("{}: metric '{}' needs {} of GEMM '{}', which this profile does not have; profile with `{}`",
                     path, nameOf(metric), what, g.label, flag);
}

double biasSqnr(const GemmProfile& g, const OperandProfile& o, const QuantFormat& format, const std::string& path,
                bool& estimated) {
  for (const FormatStats& f : o.formats) {
    if (f.bias_sqnr_mean <= 0) continue;
    if (f.format == format) return f.bias_sqnr_mean;
  }
  for (const FormatStats& f : o.formats)
    if (std::optional<int> apart = f.bias_sqnr_mean > 0 ? bitsApart(format, f.format) : std::nullopt) {
      estimated = true;
      return f.bias_sqnr_mean * std::pow(4.0, *apart);
    }
  throw Error(missing(Metric::kBias, g,
                      fmt::format("the bias-aware SQNR (bias_sqnr_mean) of its {} in {}", o.sideName(),
                                  format.toString()),
                      path, "pgq train --profile-metrics"));
}

double outputSqnr(Metric metric, const GemmProfile& g, const QuantFormat& lhs, const QuantFormat& rhs,
                  const std::string& path, bool& estimated) {
  if (const OutputErrorStats* e = g.findOutputError(lhs, rhs)) return e->sqnr_mean;
  // A 2-D (NVFP4 16x16) weight or a Hadamard transform: profiles measure the output with
  // the scheme's 1-D operand format on both non-gradient sides, untransformed; that error
  // stands in for it (an estimate: the profile's operand SQNRs show what the two change).
  auto plain = [](QuantFormat f) {
    f.block2d = false;
    f.hadamard = false;
    return f;
  };
  if (lhs.block2d || rhs.block2d || lhs.hadamard || rhs.hadamard)
    if (const OutputErrorStats* e = g.findOutputError(plain(lhs), plain(rhs))) {
      estimated = true;
      return e->sqnr_mean;
    }
  // A side narrowed by the hardware: its share of the output noise grows 4x per bit;
  // with the two sides' shares unknown, the whole output noise is scaled (an upper bound).
  for (const OutputErrorStats& e : g.output_errors) {
    std::optional<int> l = bitsApart(lhs, e.lhs_format), r = bitsApart(rhs, e.rhs_format);
    if (l && r) {
      estimated = true;
      return e.sqnr_mean * std::pow(4.0, std::min(*l, *r));
    }
  }
  throw Error(missing(metric, g,
                      fmt::format("the error of its result with inputs {} x {} (output_errors)", lhs.toString(),
                                  rhs.toString()),
                      path, "pgq train --profile-metrics"));
}

}  // namespace

std::string_view nameOf(Metric metric) { return kMetrics[static_cast<size_t>(metric)].name; }
std::string_view helpOf(Metric metric) { return kMetrics[static_cast<size_t>(metric)].help; }

std::optional<Metric> parseMetric(std::string_view name) {
  for (size_t i = 0; i < kMetrics.size(); ++i)
    if (kMetrics[i].name == name) return static_cast<Metric>(i);
  return std::nullopt;
}

std::vector<Metric> allMetrics() {
  std::vector<Metric> out;
  for (size_t i = 0; i < kMetrics.size(); ++i) out.push_back(static_cast<Metric>(i));
  return out;
}

std::string metricNames() {
  std::vector<std::string_view> names;
  for (const MetricInfo& m : kMetrics) names.push_back(m.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

Metric metricFromName(std::string_view name, std::string_view what) {
  if (std::optional<Metric> m = parseMetric(name)) return *m;
  throw Error(fmt::format("{}: unknown metric '{}'; expected one of {}", what, name, metricNames()));
}

namespace {

// How to get the statistics `metric` needs, by whoever wrote the profile.
std::string howToProfile(const Profile& profile, Metric metric) {
  const bool outputs = metric == Metric::kEffect;
  if (profile.run.collector_version > 0)
    return fmt::format("collect with `pgq_profile.collect(..., metrics=True{})`", outputs ? ", outputs=True" : "");
  return fmt::format("profile with `pgq train --profile-metrics{}` (or `pgq experiment --profile-metrics`)",
                     outputs ? " --profile-outputs" : "");
}

}  // namespace

void requireMetric(const Profile& profile, Metric metric, const std::string& profile_path) {
  if (metric == Metric::kSqnr) return;
  const char* field = metric == Metric::kBias ? "bias_sqnr_mean" : metric == Metric::kReach ? "reach" : "output_errors";
  if (!profile.run.metrics)
    throw Error(fmt::format("{}: metric '{}' needs statistics this profile was not made with (field {} of every "
                            "GEMM); {}",
                            profile_path, nameOf(metric), field, howToProfile(profile, metric)));
  if (metric != Metric::kReach && metric != Metric::kEffect) return;
  const char* reach = metric == Metric::kReach ? "reach" : "gradient_reach";
  for (const GemmProfile& g : profile.gemms) {
    if ((metric == Metric::kReach ? g.reach : g.gradient_reach) >= 0) continue;
    // The collector leaves reach out of a whole profile, and says why when it runs.
    const std::string why =
        profile.run.collector_version > 0
            ? fmt::format("the PyTorch collector leaves it out when a matrix parameter is read outside "
                          "nn.Linear/Conv1D/nn.Embedding modules (a tied head written as x @ W.T) or a layer first "
                          "runs in the backward (its warning said which){}; choose metric sqnr, bias or output, or "
                          "profile the model's ONNX export with `pgq import --profile-metrics --profile-outputs`",
                          metric == Metric::kEffect ? ", or outputs=True was not passed" : "")
        : metric == Metric::kEffect ? "the GEMM results' statistics were not logged; profile with `pgq train "
                                      "--profile-metrics --profile-outputs`"
                                    : "profile with `pgq train --profile-metrics`";
    throw Error(fmt::format("{}: metric '{}' needs {} (GEMM '{}' has none): {}", profile_path, nameOf(metric), reach,
                            g.label, why));
  }
}

bool hasMetric(const Profile& profile, Metric metric) {
  try {
    requireMetric(profile, metric, "");
    return true;
  } catch (const Error&) {
    return false;
  }
}

Metric defaultMetric(const Profile& profile) {
  return hasMetric(profile, kDefaultMetric) ? kDefaultMetric : Metric::kSqnr;
}

MetricValue metricOf(Metric metric, const GemmProfile& g, const QuantFormat& lhs_format, const QuantFormat& rhs_format,
                     double sqnr_lhs, double sqnr_rhs, const std::string& profile_path) {
  MetricValue v;
  const double sqnr = std::min(sqnr_lhs, sqnr_rhs);
  auto reach = [&](double r, const char* field, const char* flag) {
    if (r < 0)
      throw Error(missing(metric, g, fmt::format("where its result goes ({})", field), profile_path, flag));
    return std::max(r, kMinReach);
  };
  switch (metric) {
    case Metric::kSqnr:
      v.value = sqnr;
      break;
    case Metric::kBias:
      v.value = std::min(biasSqnr(g, g.lhs(), lhs_format, profile_path, v.estimated),
                         biasSqnr(g, g.rhs(), rhs_format, profile_path, v.estimated));
      break;
    case Metric::kOutput:
      v.value = outputSqnr(metric, g, lhs_format, rhs_format, profile_path, v.estimated);
      break;
    case Metric::kReach:
      v.value = sqnr / reach(g.reach, "reach", "pgq train --profile-metrics");
      break;
    case Metric::kEffect:
      v.value = outputSqnr(metric, g, lhs_format, rhs_format, profile_path, v.estimated) /
                reach(g.gradient_reach, "gradient_reach",
                      "pgq train --profile-metrics --profile-outputs");
      break;
  }
  return v;
}

}  // namespace pgq
