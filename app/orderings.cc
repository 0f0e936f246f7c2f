#include "app/orderings.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "app/plot.h"
#include "support/errors.h"
#include "support/escape.h"
#include "support/file_io.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;

std::string_view kindName(OrderingKind k) {
  switch (k) {
    case OrderingKind::kMetric: return "metric";
    case OrderingKind::kAdversarial: return "adversarial";
    case OrderingKind::kRandom: return "random";
    case OrderingKind::kPareto: return "pareto";
  }
  return "";
}

std::string axisName(const OrderingsReport& r) {
  return r.step_speedup ? "estimated step speedup"
                        : "estimated speedup of the GEMMs (the profile has no plain step time)";
}

struct Spread {
  double mean = 0, sd = 0, min = 0, max = 0;
};
Spread spreadOf(const std::vector<double>& v) {
  Spread s;
  if (v.empty()) return s;
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(ss / static_cast<double>(v.size() - 1)) : 0.0;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}

}  // namespace

std::vector<std::string> orderByScore(const std::map<std::string, double>& scores) {
  std::vector<std::pair<std::string, double>> items(scores.begin(), scores.end());
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> out;
  for (const auto& [label, score] : items) out.push_back(label);
  return out;
}

std::vector<std::string> randomOrder(std::vector<std::string> labels, uint64_t seed) {
  std::sort(labels.begin(), labels.end());
  // std::shuffle's algorithm is implementation-defined; Fisher-Yates over mt19937_64's
  // fixed output sequence gives the same permutation everywhere.
  std::mt19937_64 gen(seed);
  for (size_t i = labels.size(); i > 1; --i) std::swap(labels[i - 1], labels[gen() % i]);
  return labels;
}

double spearman(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  PGQ_ASSERT(a.size() == b.size() && a.size() >= 2, "spearman of {} and {} labels", a.size(), b.size());
  std::map<std::string, double> rank_b;
  for (size_t i = 0; i < b.size(); ++i) rank_b[b[i]] = static_cast<double>(i);
  double d2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    auto it = rank_b.find(a[i]);
    PGQ_ASSERT(it != rank_b.end(), "label {} in one order only", a[i]);
    d2 += (static_cast<double>(i) - it->second) * (static_cast<double>(i) - it->second);
  }
  const double n = static_cast<double>(a.size());
  return 1.0 - 6.0 * d2 / (n * (n * n - 1.0));
}

double curveArea(const std::vector<CurvePoint>& points) {
  PGQ_ASSERT(points.size() >= 2, "a curve needs two points");
  const double span = points.back().est_speedup - points.front().est_speedup;
  PGQ_ASSERT(span > 0, "the curve spans no speedup");
  double area = 0;
  for (size_t i = 1; i < points.size(); ++i)
    area += (points[i].est_speedup - points[i - 1].est_speedup) * (points[i].delta_pct + points[i - 1].delta_pct) / 2;
  return area / span;
}

void writeOrderingsReport(const OrderingsReport& r) {
  // Summary: each ordering's area; random orderings as their mean, spread and range.
  std::vector<double> random_areas;
  for (const Curve& c : r.curves)
    if (c.kind == OrderingKind::kRandom) random_areas.push_back(c.area);
  const Spread random = spreadOf(random_areas);
  std::string md = fmt::format(
      "# Fig. 2 measured: orderings of the {} candidates ({})\n\n"
      "{} candidate GEMMs (those the roofline keeps), each ordering cut at the same counts and fine-tuned {} steps "
      "from the same baseline checkpoint with the same batches and seed. Speed: the {} of each cut's recipe "
      "(roofline, deterministic); loss: mean training loss over the last half of the run, against the f32 run. "
      "**Area**: the mean loss increase over f32 (%) across the speed range, the curve through (1, 0), each cut "
      "and all candidates, linear between points (lower is better).\n\n"
      "| ordering | kind | area (mean loss increase, %) | vs random mean |\n|---|---|---|---|\n",
      r.direction, r.setting, r.candidates, r.finetune_steps, axisName(r));
  std::vector<const Curve*> sorted;
  for (const Curve& c : r.curves) sorted.push_back(&c);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Curve* a, const Curve* b) { return a->area < b->area; });
  for (const Curve* c : sorted) {
    if (c->kind == OrderingKind::kRandom) continue;
    md += fmt::format("| {} | {} | {:.4f} | {} |\n", c->name, kindName(c->kind), c->area,
                      random_areas.empty() ? "–" : fmt::format("{:+.4f}", c->area - random.mean));
  }
  if (!random_areas.empty())
    md += fmt::format("| random (mean of {}) | random | {:.4f} (sd {:.4f}, range {:.4f} .. {:.4f}) | 0 |\n",
                      random_areas.size(), random.mean, random.sd, random.min, random.max);

  md += "\n## Every point\n\n| ordering | GEMMs | est. speedup | step ms | loss | vs f32 | val loss | run |\n"
        "|---|---|---|---|---|---|---|---|\n";
  std::string csv = "ordering,kind,area,count,est_speedup,step_ms,mean_loss,delta_pct,val_loss,run\n";
  for (const Curve& c : r.curves)
    for (const CurvePoint& p : c.points) {
      md += fmt::format("| {} | {}/{} | {:.3f}x | {:.1f} | {:.4f} | {:+.2f}% | {:.4f} | {} |\n", c.name, p.count,
                        r.candidates, p.est_speedup, p.step_ms, p.mean_loss, p.delta_pct, p.val_loss, p.run);
      csv += fmt::format("{},{},{:.6g},{},{:.6g},{:.6g},{:.9g},{:.6g},{:.9g},{}\n", csvField(c.name), kindName(c.kind),
                         c.area, p.count, p.est_speedup, p.step_ms, p.mean_loss, p.delta_pct, p.val_loss, csvField(p.run));
    }
  // The random orderings' mean curve at each count.
  if (!random_areas.empty()) {
    md += "\n## Random orderings, mean and spread at each count\n\n| GEMMs | est. speedup (mean) | vs f32 mean | sd | "
          "min | max |\n|---|---|---|---|---|---|\n";
    const Curve* first = nullptr;
    for (const Curve& c : r.curves)
      if (c.kind == OrderingKind::kRandom) {
        first = &c;
        break;
      }
    for (size_t i = 0; i < first->points.size(); ++i) {
      std::vector<double> d, s;
      for (const Curve& c : r.curves)
        if (c.kind == OrderingKind::kRandom && i < c.points.size()) {
          d.push_back(c.points[i].delta_pct);
          s.push_back(c.points[i].est_speedup);
        }
      Spread ds = spreadOf(d), ss = spreadOf(s);
      md += fmt::format("| {}/{} | {:.3f}x | {:+.2f}% | {:.2f} | {:+.2f}% | {:+.2f}% |\n", first->points[i].count,
                        r.candidates, ss.mean, ds.mean, ds.sd, ds.min, ds.max);
    }
  }
  if (!r.pareto_table.empty())
    md += fmt::format("\n## The Pareto estimate\n\nEach candidate quantized alone for {} steps from the same "
                      "checkpoint, and one f32 run of the same length ({} runs, {} steps in all, {:.1f}x the steps of "
                      "one cut's run); its loss change over that f32 run, divided by its estimated saving, orders the "
                      "candidates (cheapest first).\n\n{}",
                      r.pareto_cost_steps / static_cast<double>(r.candidates + 1), r.candidates + 1,
                      r.pareto_cost_steps, r.pareto_cost_steps / static_cast<double>(r.finetune_steps),
                      r.pareto_table);
  // How each ordering agrees with the Pareto estimate, and the GEMMs that mislead it most:
  // those it would quantize early (first half) that the estimate puts last.
  const Ordering* pareto = nullptr;
  for (const Ordering& o : r.orders)
    if (o.kind == OrderingKind::kPareto) pareto = &o;
  std::string ranks = "label";
  for (const Ordering& o : r.orders) ranks += "," + o.name;
  ranks += "\n";
  if (!r.orders.empty()) {
    std::vector<std::string> labels = r.orders.front().labels;
    std::sort(labels.begin(), labels.end());
    std::vector<std::map<std::string, size_t>> rank_of(r.orders.size());
    for (size_t k = 0; k < r.orders.size(); ++k)
      for (size_t i = 0; i < r.orders[k].labels.size(); ++i) rank_of[k][r.orders[k].labels[i]] = i + 1;
    for (const std::string& l : labels) {
      ranks += l;
      for (size_t k = 0; k < r.orders.size(); ++k) ranks += fmt::format(",{}", rank_of[k][l]);
      ranks += "\n";
    }
  }
  if (pareto) {
    std::map<std::string, size_t> pareto_rank;
    for (size_t i = 0; i < pareto->labels.size(); ++i) pareto_rank[pareto->labels[i]] = i + 1;
    md += "\n## Agreement with the Pareto estimate\n\nSpearman's rank correlation of each ordering with the "
          "Pareto estimate's (1: the same order), and the GEMMs it misplaces most: quantized in its first half, "
          "ranked among the costliest by the estimate (rank there in brackets; ranks of every ordering in "
          "ranks.csv).\n\n| ordering | Spearman with pareto | misplaced most |\n|---|---|---|\n";
    for (const Ordering& o : r.orders) {
      if (o.kind == OrderingKind::kPareto || o.kind == OrderingKind::kRandom) continue;
      std::vector<std::pair<size_t, std::string>> early;
      for (size_t i = 0; i < o.labels.size() / 2; ++i) early.emplace_back(pareto_rank[o.labels[i]], o.labels[i]);
      std::sort(early.rbegin(), early.rend());
      std::string worst;
      for (size_t i = 0; i < std::min<size_t>(3, early.size()); ++i)
        worst += fmt::format("{}{} ({})", i ? ", " : "", markdownCell(markdownCode(early[i].second)), early[i].first);
      md += fmt::format("| {} | {:+.3f} | {} |\n", o.name, spearman(o.labels, pareto->labels), worst);
    }
  }
  md += "\n![Fig. 2](fig2.png)\n";

  // Fig. 2: loss increase against estimated speedup, one line per ordering; random ones thin.
  std::vector<std::pair<std::string, std::string>> data;
  std::string plots;
  int colour = 0;
  const char* colours[] = {"#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
  for (size_t i = 0; i < r.curves.size(); ++i) {
    const Curve& c = r.curves[i];
    std::string rows;
    for (const CurvePoint& p : c.points) rows += fmt::format("{:.6g} {:.6g}\n", p.est_speedup, p.delta_pct);
    std::string file = fmt::format("c{}.dat", i);
    data.emplace_back(file, rows);
    std::string style;
    if (c.kind == OrderingKind::kRandom)
      style = "lines lw 1 lc rgb '#bbbbbb' notitle";
    else if (c.kind == OrderingKind::kPareto)
      style = fmt::format("linespoints lw 3 lc rgb 'black' pt 7 title 'pareto estimate ({:.3f})'", c.area);
    else if (c.kind == OrderingKind::kAdversarial)
      style = fmt::format("linespoints lw 2 dt 2 lc rgb '#d62728' pt 6 title 'adversarial ({:.3f})'", c.area);
    else
      style = fmt::format("linespoints lw 2 lc rgb '{}' pt 5 title {}", colours[colour++ % 7],
                          gnuplotText(fmt::format("{} ({:.3f})", c.name, c.area)));
    plots += fmt::format("{}'{}' using 1:2 with {}", plots.empty() ? "plot " : ", \\\n     ", file, style);
  }
  if (!random_areas.empty()) {
    // A legend entry for the random orderings.
    plots += fmt::format(", \\\n     NaN with lines lw 1 lc rgb '#bbbbbb' title 'random x{} (mean {:.3f})'",
                         random_areas.size(), random.mean);
  }
  std::string script = fmt::format(
      "set title {}\n"
      "set xlabel {}\nset ylabel 'loss increase over f32 (%)'\nset grid\n"
      "set key top left\n{}\n",
      gnuplotText(fmt::format("{} candidates, {}: loss vs speed by ordering (area in brackets)", r.direction, r.setting)),
      gnuplotText(axisName(r)), plots);
  fs::create_directories(r.out_dir);
  writeFileAtomically((fs::path(r.out_dir) / "orderings.md").string(), md);
  writeFileAtomically((fs::path(r.out_dir) / "orderings.csv").string(), csv);
  writeFileAtomically((fs::path(r.out_dir) / "ranks.csv").string(), ranks);
  renderPlot(script, data, (fs::path(r.out_dir) / "fig2.png").string(), 1100, 650);
}

}  // namespace pgq
