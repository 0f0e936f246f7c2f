#include "plan/sqnr_table.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/quant_scheme.h"
#include "support/errors.h"
#include "support/escape.h"
#include "support/json_text.h"

namespace pgq {

double SqnrInput::db() const { return 10.0 * std::log10(std::max(sqnr, 1e-30)); }
double SqnrInput::ln1p() const { return std::log1p(sqnr); }

std::vector<SqnrRow> sqnrRows(const Profile& profile, const QuantFormat& format,
                              const std::optional<QuantFormat>& gradient_format, Metric sort,
                              const std::string& profile_path) {
  requireMetric(profile, sort, profile_path.empty() ? profile.source : profile_path);
  const size_t n_metrics = allMetrics().size();
  std::vector<SqnrRow> rows;
  for (const GemmProfile& g : profile.gemms) {
    SqnrRow row{g.label, g.direction, g.gemm_shape, g.devices > 1 ? g.device_shape : g.gemm_shape, g.intensity(), {}, {}, {}};
    QuantFormat formats[2];
    for (int side = 0; side < 2; ++side) {
      const OperandProfile& o = g.operands[static_cast<size_t>(side)];
      formats[side] = o.role == OperandRole::kGradient && gradient_format ? *gradient_format : format;
      const FormatStats* f = o.find(formats[side]);
      if (!f) {
        std::vector<std::string> have;
        for (const FormatStats& s : o.formats) have.push_back(s.format.toString());
        const bool by_gradient_format = o.role == OperandRole::kGradient && gradient_format;
        throw Error(fmt::format("{}: {} {} was not profiled in {}, which {} asks for (it has: {}); profile with pgq "
                                "train --profile-formats to add it",
                                profile_path.empty() ? profile.source : profile_path, g.label, o.sideName(),
                                formats[side].toString(), by_gradient_format ? "--gradient-format" : "--format",
                                fmt::join(have, ", ")));
      }
      (side == 0 ? row.lhs : row.rhs) = {*o.role, f->sqnr_mean};
    }
    row.metrics.assign(n_metrics, std::nan(""));
    for (Metric m : allMetrics()) {
      // A column the profile cannot fill stays empty; sorting by it was refused above.
      try {
        row.metrics[static_cast<size_t>(m)] =
            metricOf(m, g, formats[0], formats[1], row.lhs.sqnr, row.rhs.sqnr, profile.source).value;
      } catch (const Error&) {
        if (m == sort) throw;
      }
    }
    rows.push_back(std::move(row));
  }
  const size_t key = static_cast<size_t>(sort);
  std::stable_sort(rows.begin(), rows.end(),
                   [key](const SqnrRow& a, const SqnrRow& b) { return a.metrics[key] < b.metrics[key]; });
  return rows;
}

std::vector<Metric> metricsShown(const std::vector<SqnrRow>& rows) {
  std::vector<Metric> shown;
  for (Metric m : allMetrics())
    if (m == Metric::kSqnr || std::any_of(rows.begin(), rows.end(), [m](const SqnrRow& r) {
          return !std::isnan(r.metrics[static_cast<size_t>(m)]);
        }))
      shown.push_back(m);
  return shown;
}

std::string sqnrTableMarkdown(const std::vector<SqnrRow>& rows, const std::string& format) {
  const std::vector<Metric> shown = metricsShown(rows);
  std::string extra_head, extra_rule;
  for (Metric m : shown)
    if (m != Metric::kSqnr) extra_head += fmt::format(" {} |", nameOf(m)), extra_rule += "---|";
  std::string out = fmt::format(
      "SQNR of GEMM inputs in {} (ratio E[x^2]/E[(Q(x)-x)^2], mean over the logged steps){}\n\n"
      "| # | GEMM | direction | roles (lhs, rhs) | M,K,N | flop/B | lhs SQNR | lhs dB | lhs ln(1+SQNR) | rhs SQNR | "
      "rhs dB | rhs ln(1+SQNR) |{}\n|---|---|---|---|---|---|---|---|---|---|---|---|{}\n",
      format,
      shown.size() > 1 ? "; then each other metric as an effective SQNR (higher is safer; docs/METRICS.md)" : "",
      extra_head, extra_rule);
  for (size_t i = 0; i < rows.size(); ++i) {
    const SqnrRow& r = rows[i];
    // Under tensor parallelism: the global shape, then each device's.
    std::string shape = r.device_shape == r.gemm_shape
                            ? gemmShapeText(r.gemm_shape)
                            : fmt::format("{} ({} per device)", gemmShapeText(r.gemm_shape),
                                          gemmShapeText(r.device_shape));
    std::string extra;
    for (Metric m : shown) {
      if (m == Metric::kSqnr) continue;
      double v = r.metrics[static_cast<size_t>(m)];
      extra += std::isnan(v) ? " – |" : fmt::format(" {:.4g} |", v);
    }
    out += fmt::format("| {} | {} | {} | {}, {} | {} | {:.1f} | {:.4g} | {:.1f} | {:.2f} | {:.4g} | {:.1f} | {:.2f} |{}\n", i + 1,
                       markdownCell(r.label), r.direction, r.lhs.role, r.rhs.role, shape, r.intensity, r.lhs.sqnr,
                       r.lhs.db(), r.lhs.ln1p(), r.rhs.sqnr, r.rhs.db(), r.rhs.ln1p(), extra);
  }
  return out;
}

std::string sqnrTableCsv(const std::vector<SqnrRow>& rows) {
  std::string out =
      "rank,label,direction,lhs_role,rhs_role,batch,m,k,n,intensity,lhs_sqnr,lhs_db,lhs_ln1p,rhs_sqnr,rhs_db,rhs_ln1p,"
      "min_sqnr";
  for (Metric m : allMetrics())
    if (m != Metric::kSqnr) out += fmt::format(",{}", nameOf(m));
  out += "\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const SqnrRow& r = rows[i];
    out += fmt::format("{},{},{},{},{},{},{},{},{},{:.6g},{:.9g},{:.6g},{:.6g},{:.9g},{:.6g},{:.6g},{:.9g}", i + 1,
                       csvField(r.label), r.direction, r.lhs.role, r.rhs.role, r.gemm_shape[0], r.gemm_shape[1], r.gemm_shape[2],
                       r.gemm_shape[3], r.intensity, r.lhs.sqnr, r.lhs.db(), r.lhs.ln1p(), r.rhs.sqnr, r.rhs.db(),
                       r.rhs.ln1p(), r.minSqnr());
    for (Metric m : allMetrics()) {
      if (m == Metric::kSqnr) continue;
      double v = r.metrics[static_cast<size_t>(m)];
      out += std::isnan(v) ? std::string(",") : fmt::format(",{:.9g}", v);
    }
    out += "\n";
  }
  return out;
}

std::string sqnrTableJson(const std::vector<SqnrRow>& rows, const std::string& format,
                          const std::string& gradient_format) {
  // Each row's metrics beyond SQNR as an object, every metric the table shows (null in a
  // row without its statistics); absent when the profile has none.
  const std::vector<Metric> shown = metricsShown(rows);
  auto metrics = [&](const SqnrRow& r) {
    if (shown.size() < 2) return std::string();
    std::string o = ", \"metrics\": {";
    for (Metric m : shown) {
      double v = r.metrics[static_cast<size_t>(m)];
      o += fmt::format("{}{}: {}", m == shown.front() ? "" : ", ", jsonString(nameOf(m)),
                       std::isfinite(v) ? fmt::format("{:.9g}", v) : std::string("null"));
    }
    return o + "}";
  };
  std::string out = fmt::format("{{\"format\": {}, {}\"rows\": [", jsonString(format),
                                gradient_format.empty()
                                    ? std::string()
                                    : fmt::format("\"gradient_format\": {}, ", jsonString(gradient_format)));
  for (size_t i = 0; i < rows.size(); ++i) {
    const SqnrRow& r = rows[i];
    auto input = [](const SqnrInput& in) {
      return fmt::format("{{\"role\": {}, \"sqnr\": {:.9g}, \"db\": {:.6g}, \"ln1p\": {:.6g}}}", jsonString(nameOf(in.role)),
                         in.sqnr, in.db(), in.ln1p());
    };
    out += fmt::format(
        "{}\n  {{\"rank\": {}, \"label\": {}, \"direction\": {}, \"gemm_shape\": [{},{},{},{}], \"intensity\": {:.6g}, "
        "\"lhs\": {}, \"rhs\": {}{}}}",
        i ? "," : "", i + 1, jsonString(r.label), jsonString(nameOf(r.direction)), r.gemm_shape[0], r.gemm_shape[1],
        r.gemm_shape[2], r.gemm_shape[3], r.intensity, input(r.lhs), input(r.rhs), metrics(r));
  }
  return out + "\n]}\n";
}

int CompareRow::maxRankShift() const {
  int shift = 0;
  for (int r : rank) shift = std::max(shift, std::abs(r - rank.front()));
  return shift;
}

SqnrComparison compareSqnr(const Profile& profile, const std::vector<std::string>& columns) {
  if (columns.empty()) throw Error("compare at least one format");
  SqnrComparison c;
  c.columns = columns;
  // Each column's formats, read once: a scheme's with round to nearest, or one format
  // for every operand.
  std::vector<SchemeFormats> column_formats;
  for (const std::string& column : columns) {
    if (std::optional<Scheme> scheme = parseScheme(column)) {
      column_formats.push_back(schemeFormats(*scheme, Rounding::kNearest, Rounding::kNearest));
    } else {
      // A format names what every operand is compared in, gradients included.
      const QuantFormat format = QuantFormat::parse(column);
      column_formats.push_back({format, format, format});
    }
  }
  for (const GemmProfile& g : profile.gemms)
    for (int side = 0; side < 2; ++side) {
      const OperandProfile& o = g.operands[static_cast<size_t>(side)];
      CompareRow row{g.label, *o.side, *o.role, g.direction, {}, {}, {}};
      for (size_t k = 0; k < columns.size(); ++k) {
        const QuantFormat& format =
            o.role == OperandRole::kGradient ? column_formats[k].gradient : column_formats[k].operand;
        const FormatStats* f = o.find(format);
        if (!f)
          throw Error(fmt::format("{}: {} {} was not profiled in {} (column {}); profile with pgq train "
                                  "--profile-formats {}",
                                  profile.source, g.label, o.sideName(), format.toString(), columns[k], columns[k]));
        row.formats.push_back(format);
        row.sqnr.push_back(f->sqnr_mean);
      }
      c.rows.push_back(std::move(row));
    }
  // Ranks per column (ties keep profile order).
  const size_t n = c.rows.size();
  for (size_t k = 0; k < columns.size(); ++k) {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return c.rows[a].sqnr[k] < c.rows[b].sqnr[k]; });
    for (size_t i = 0; i < n; ++i) {
      c.rows[order[i]].rank.resize(columns.size());
      c.rows[order[i]].rank[k] = static_cast<int>(i + 1);
    }
  }
  for (size_t k = 0; k < columns.size(); ++k) {
    double d2 = 0;
    for (const CompareRow& r : c.rows) d2 += std::pow(r.rank[k] - r.rank[0], 2);
    const double nn = static_cast<double>(n);
    c.spearman.push_back(n > 1 ? 1.0 - 6.0 * d2 / (nn * (nn * nn - 1.0)) : 1.0);
  }
  std::stable_sort(c.rows.begin(), c.rows.end(), [](const CompareRow& a, const CompareRow& b) { return a.rank[0] < b.rank[0]; });
  return c;
}

namespace {

std::string compareLine(const CompareRow& r) {
  std::string line = fmt::format("| {} | {} | {} | {} |", markdownCell(r.label), r.side, r.role, r.direction);
  for (size_t k = 0; k < r.sqnr.size(); ++k) line += fmt::format(" {:.4g} ({}) |", r.sqnr[k], r.rank[k]);
  return line + fmt::format(" {} |\n", r.maxRankShift());
}

}  // namespace

std::string sqnrComparisonMarkdown(const SqnrComparison& c, size_t top) {
  std::string head = "| GEMM | side | role | direction |";
  std::string rule = "|---|---|---|---|";
  for (const std::string& column : c.columns) {
    head += fmt::format(" {} SQNR (rank) |", column);
    rule += "---|";
  }
  head += " max rank shift |\n";
  rule += "---|\n";
  std::string out = fmt::format("SQNR of {} GEMM inputs per format (rank 1 = lowest; round to nearest)\n\n",
                                c.rows.size());
  out += "Spearman rank correlation with " + c.columns.front() + ":";
  for (size_t k = 0; k < c.columns.size(); ++k) out += fmt::format(" {} {:.3f}{}", c.columns[k], c.spearman[k], k + 1 < c.columns.size() ? "," : "");
  out += fmt::format("\n\nThe {} lowest in {}:\n\n", std::min(top, c.rows.size()), c.columns.front()) + head + rule;
  for (size_t i = 0; i < std::min(top, c.rows.size()); ++i) out += compareLine(c.rows[i]);
  std::vector<const CompareRow*> movers;
  for (const CompareRow& r : c.rows) movers.push_back(&r);
  std::stable_sort(movers.begin(), movers.end(), [](auto* a, auto* b) { return a->maxRankShift() > b->maxRankShift(); });
  out += fmt::format("\nThe {} largest rank shifts:\n\n", std::min(top, movers.size())) + head + rule;
  for (size_t i = 0; i < std::min(top, movers.size()); ++i) out += compareLine(*movers[i]);
  return out;
}

std::string sqnrComparisonCsv(const SqnrComparison& c) {
  std::string out = "label,side,role,direction";
  for (const std::string& column : c.columns) out += fmt::format(",{0}_format,{0}_sqnr,{0}_rank", column);
  out += ",max_rank_shift\n";
  for (const CompareRow& r : c.rows) {
    out += fmt::format("{},{},{},{}", csvField(r.label), r.side, r.role, r.direction);
    for (size_t k = 0; k < r.sqnr.size(); ++k)
      out += fmt::format(",{},{:.9g},{}", r.formats[k].toString(), r.sqnr[k], r.rank[k]);
    out += fmt::format(",{}\n", r.maxRankShift());
  }
  return out;
}

std::vector<ScalingRow> scalingRows(const Profile& profile) {
  std::vector<ScalingRow> rows;
  for (const GemmProfile& g : profile.gemms)
    for (const OperandProfile& o : g.operands) {
      if (!o.scaling)
        throw Error(fmt::format("{}: {} {} has no scaling record (it needs a profile of 2 or more steps made by a "
                                "pgq that records them: pgq train --profile-steps N)",
                                profile.source, g.label, o.sideName()));
      rows.push_back({g.label, g.direction, std::string(o.sideName()), std::string(o.roleName()), *o.scaling});
    }
  auto key = [](const ScalingRow& r) {
    const ScalingStats& s = r.scaling;
    return std::tuple(s.delayed_worst_ratio, s.delayed_clip_fraction, s.predicted ? s.predicted->clip_fraction : -1.0);
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const ScalingRow& a, const ScalingRow& b) { return key(a) > key(b); });
  return rows;
}

std::string scalingTableMarkdown(const std::vector<ScalingRow>& rows) {
  const ScalingStats& first = rows.front().scaling;
  std::string out = fmt::format(
      "Scaling strategies of GEMM inputs over {} logged steps: how often a per-tensor scale taken from the amax "
      "history of the previous {} steps (delayed scaling) or, for weights, from the previous step's amax + lr "
      "(predicted) would have clipped the operand (a ratio above 1: by how much at worst); worst first\n\n"
      "| # | GEMM | direction | operand | role | delayed clips | delayed worst ratio | predicted clips | "
      "predicted worst ratio | predicted over-estimate |\n|---|---|---|---|---|---|---|---|---|---|\n",
      first.steps, first.delayed_history);
  for (size_t i = 0; i < rows.size(); ++i) {
    const ScalingRow& r = rows[i];
    const ScalingStats& s = r.scaling;
    std::string predicted = "- | - | -";
    if (const std::optional<PredictedScaling>& p = s.predicted)
      predicted = fmt::format("{:.1f}% | {:.6g} | {:.6g}", 100 * p->clip_fraction, p->worst_ratio, p->overestimate);
    out += fmt::format("| {} | {} | {} | {} | {} | {:.1f}% | {:.6g} | {} |\n", i + 1, markdownCell(r.label), r.direction, r.side,
                       r.role, 100 * s.delayed_clip_fraction, s.delayed_worst_ratio, predicted);
  }
  return out;
}

std::string scalingTableCsv(const std::vector<ScalingRow>& rows) {
  std::string out =
      "rank,label,direction,side,role,steps,delayed_history,delayed_clip_fraction,delayed_worst_ratio,"
      "predicted_clip_fraction,predicted_worst_ratio,predicted_overestimate,predicted_rigorous_clip_fraction,"
      "predicted_rigorous_overestimate\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const ScalingRow& r = rows[i];
    const ScalingStats& s = r.scaling;
    std::string predicted = ",,,,";
    if (const std::optional<PredictedScaling>& p = s.predicted)
      predicted = fmt::format("{:.9g},{:.9g},{:.9g},{:.9g},{:.9g}", p->clip_fraction, p->worst_ratio, p->overestimate,
                              p->rigorous_clip_fraction, p->rigorous_overestimate);
    out += fmt::format("{},{},{},{},{},{},{},{:.9g},{:.9g},{}\n", i + 1, csvField(r.label), r.direction, r.side, r.role, s.steps,
                       s.delayed_history, s.delayed_clip_fraction, s.delayed_worst_ratio, predicted);
  }
  return out;
}

std::string scalingTableJson(const std::vector<ScalingRow>& rows) {
  std::string out = "{\"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const ScalingRow& r = rows[i];
    const ScalingStats& s = r.scaling;
    std::string predicted = "null";
    if (const std::optional<PredictedScaling>& p = s.predicted)
      predicted = fmt::format(
          "{{\"clip_fraction\": {:.9g}, \"worst_ratio\": {:.9g}, \"overestimate\": {:.9g}, "
          "\"rigorous_clip_fraction\": {:.9g}, \"rigorous_overestimate\": {:.9g}}}",
          p->clip_fraction, p->worst_ratio, p->overestimate, p->rigorous_clip_fraction, p->rigorous_overestimate);
    out += fmt::format(
        "{}\n  {{\"rank\": {}, \"label\": {}, \"direction\": {}, \"side\": {}, \"role\": {}, \"steps\": {}, "
        "\"delayed_history\": {}, \"delayed_clip_fraction\": {:.9g}, \"delayed_worst_ratio\": {:.9g}, "
        "\"predicted\": {}}}",
        i ? "," : "", i + 1, jsonString(r.label), jsonString(nameOf(r.direction)), jsonString(r.side),
        jsonString(r.role), s.steps, s.delayed_history, s.delayed_clip_fraction, s.delayed_worst_ratio, predicted);
  }
  return out + "\n]}\n";
}


}  // namespace pgq
