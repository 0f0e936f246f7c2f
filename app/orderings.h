#pragma once
// `pgq experiment --orderings`: the paper's Fig. 2 measured. For one direction's
// quantization candidates (the GEMMs the roofline keeps), several orderings are each
// cut at the same GEMM counts (e.g. 25%, 50%, 75% of the candidates, and all of them),
// every cut fine-tuned from the same baseline, and each ordering's speed-vs-loss curve
// summarised by one number:
//
//   area = (1 / (s_all - 1)) * integral over s in [1, s_all] of dloss(s) ds
//
// the mean loss increase over f32 (in %) across the speed range, s the estimated step
// speedup (roofline, RecipeSummary::estimatedStepSpeedup; of the GEMMs alone when the
// profile has no plain step time, as when it was made from a checkpoint) and dloss the curve through
// (1, 0) at no GEMM, each cut, and (s_all, dloss_all) at every candidate, linear between
// points. Lower is better; the Pareto-optimal ordering has the lowest.
//
// Orderings: every metric (plan/gemm_metric.h, highest value quantized first), the
// adversarial one (SQNR lowest first), R random permutations, and a Pareto estimate:
// each candidate quantized alone for a short run, its loss change over the f32 run of
// the same steps divided by its estimated time saving, cheapest first (greedy).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pgq {

enum class OrderingKind { kMetric, kAdversarial, kRandom, kPareto };

struct Ordering {
  std::string name;  // "sqnr", "bias", "adversarial", "random 3", "pareto"
  OrderingKind kind = OrderingKind::kMetric;
  std::vector<std::string> labels;  // candidates, first quantized first
};

// Labels by score, highest first; ties by label so that the order is reproducible.
std::vector<std::string> orderByScore(const std::map<std::string, double>& scores);
// A permutation of `labels` (taken in sorted order) from a seeded generator.
std::vector<std::string> randomOrder(std::vector<std::string> labels, uint64_t seed);

struct CurvePoint {
  int64_t count = 0;       // candidates quantized
  double est_speedup = 1;  // estimated step speedup
  double step_ms = 0;      // measured median step time of the run
  double mean_loss = 0;    // mean training loss over the run's last half
  double delta_pct = 0;    // mean_loss vs f32, in %
  double val_loss = 0;
  std::string run;         // run folder name
};

struct Curve {
  std::string name;
  OrderingKind kind = OrderingKind::kMetric;
  std::vector<CurvePoint> points;  // by count, starting with 0 (f32) and ending with all
  double area = 0;
};

// The area of a curve whose points are sorted by count (above). Needs >= 2 points and a
// last speedup > 1.
double curveArea(const std::vector<CurvePoint>& points);

struct OrderingsReport {
  std::string out_dir;
  std::string direction;          // bwd | fwd
  std::string setting;            // formats and rounding, for titles
  // What the speed axis is: the estimated step speedup when the profile knows the plain
  // step time, else the estimated speedup of the GEMMs alone.
  bool step_speedup = true;
  int64_t candidates = 0;
  int64_t finetune_steps = 0;
  std::vector<Curve> curves;
  // Every ordering's full order (metrics, adversarial, random, pareto): ranks.csv, and
  // how each metric's ranks agree with the Pareto estimate's.
  std::vector<Ordering> orders;
  std::string pareto_table;       // markdown, empty without a Pareto estimate
  double pareto_cost_steps = 0;   // steps the estimate took
};

// Spearman's rank correlation of two orders of the same labels (1: the same order).
double spearman(const std::vector<std::string>& a, const std::vector<std::string>& b);

// Writes orderings.md, orderings.csv, ranks.csv and fig2.png into out_dir.
void writeOrderingsReport(const OrderingsReport& report);

}  // namespace pgq
