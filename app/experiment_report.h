#pragma once
// The files an experiment leaves behind and the report written from them: per-run
// summaries (runs/<name>/result.yaml, from the run's own metrics.csv), Table I
// (table.md, table.csv), the loss curves (loss_curves.png, Fig. 4), speedup vs loss
// (speedup_vs_loss.png, Fig. 5), the SQNR table and plot, and REPORT.md.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/experiment.h"
#include "frontend/model_config.h"
#include "support/quant_format.h"

namespace pgq {

struct RunStep {
  int64_t step = 0;
  double loss = 0;
  double step_ms = 0;
  std::optional<double> val_loss;
};

// Reads a run's metrics.csv (the trainer's columns).
std::vector<RunStep> readMetrics(const std::string& path);

struct RunSummary {
  std::string name;    // f32, or the policy name
  std::string policy;
  std::string recipe;  // recipe file, empty for f32
  int64_t first_step = 0;
  int64_t last_step = 0;
  double step_ms = 0;    // median step time, the run's first step excluded
  // How much the step times varied: (90th - 10th percentile) / median, the first step
  // excluded (0 with fewer than 3 such steps, or from a summary written before it).
  double step_spread = 0;
  double mean_loss = 0;  // mean training loss over the last half of the run
  double final_val_loss = 0;
  int fwd_quantized = 0, fwd_total = 0, bwd_quantized = 0, bwd_total = 0;
  bool within_budget = false;  // search trials
  // A policy with an inverted threshold (F+B_SR<t): it quantizes the lowest-SQNR GEMMs
  // to check that the metric is informative, so the report never recommends it.
  bool adversarial = false;
  // What a finished run started from, so that a resumed experiment reuses it only for the
  // same run: a hash of its recipe's text (empty for f32) and checkpointIdentity() of the
  // checkpoint it started from. Empty in summaries written before session 16.
  std::string recipe_hash;
  std::string start;
};

// A file-name-safe form of a run name: "F+B_SR>1.5" -> "F+B_SR_gt_1.5".
std::string runSlug(const std::string& name);
RunSummary summarizeRun(const std::string& name, const std::string& policy, const std::string& recipe,
                        const std::vector<RunStep>& steps);
void writeRunSummary(const std::string& path, const RunSummary& summary);
RunSummary loadRunSummary(const std::string& path);

struct ReportInputs {
  std::string out_dir;
  ModelConfig model;
  std::string corpus;
  std::string hardware;
  int64_t baseline_steps = 0;
  int64_t finetune_steps = 0;
  int64_t profile_steps = 0;
  int threads = 0;
  std::vector<double> fractions;
  // The format whose SQNR the report shows: the experiment's bits and granularity,
  // round to nearest (every GEMM operand is profiled in it).
  QuantFormat sqnr_format = perChannelFormat(8);
  // What the thresholded recipes (F+B_SR>t, <t) compared: "SQNR" or a metric's name
  // (plan/gemm_metric.h).
  std::string metric = "SQNR";
  // What the recipes quantize to, for the tables' headings ("int8", "int4", "fp8").
  std::string quantized_in = "int8";
  std::vector<RunSummary> runs;  // f32 first
  // The f32 step timed again after every fine-tune (timingCheck).
  std::optional<RunSummary> f32_again;
};

// Whether the experiment's step times can be trusted, judged from the runs themselves:
// empty when they can, else why not (the machine got busier or quieter during the
// experiment, so speedups compare steps timed under different loads). Flagged, for
// steps of 20 ms or more (shorter ones move with the scheduler's jitter anyway): the f32
// step timed again at the end differs from the f32 run's by more than 20%, or a run's
// step times spread by more than half their median (90th - 10th percentile; the runs
// committed in docs/results, from quiet machines, spread by 0.05-0.44, one by 0.64).
std::string timingCheck(const std::vector<RunSummary>& runs, const RunSummary& f32_again);

ExperimentResult writeExperimentReport(const ReportInputs& in);
void writeSearchReport(const std::string& out_dir, const std::vector<RunSummary>& trials, const RunSummary& best,
                       double loss_budget, const std::string& quantized_in = "int8");

}  // namespace pgq
