#pragma once
// `pgq experiment`: the paper's protocol on one model and corpus, end to end.
//
//   1. baseline  train in f32 for `baseline_steps` (or start from a checkpoint), logging
//                GEMM statistics during the last `profile_steps` of them (stage i);
//   2. recipes   generate the standard recipes from that profile (stage ii): F, F+B,
//                F+B_SR, and for each fraction f, F+B_SR>t quantizing the backward
//                GEMMs with the highest SQNR (a fraction f of the candidates) and its
//                adversarial twin F+B_SR<t' quantizing the same number with the lowest;
//   3. fine-tune from the baseline checkpoint with every recipe and in f32, for
//                `finetune_steps`, same data order and seed (stage iii);
//   4. report    Table I (step time, speedup, mean loss over the last half, delta), the
//                loss curves (Fig. 4), speedup vs loss with the SQNR and adversarial
//                curves (Fig. 5), the SQNR table and plot, and REPORT.md.
//
// Every phase leaves its result in the output folder and is skipped when the run is
// started again (an interrupted run resumes from its last checkpoint); the report is
// written from those files only.
//
// The protocol (ExperimentProtocol) says what phases 2-3 compare. kRecipes: the above.
// kSearch: a threshold search instead: from the paper's priors
// (forward SQNR 20, backward 1) the backward then the forward threshold are bisected
// over the SQNR values of the profile with short trial runs, to find the fastest
// recipe whose loss stays within `loss_budget` of the f32 baseline. kOrderings: Fig. 2,
// the candidates cut at several points in the orders of every metric (app/orderings.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/gemm_metric.h"
#include "runtime/trainer.h"

namespace pgq {

// What an experiment compares after its baseline and profile.
enum class ExperimentProtocol {
  kRecipes,    // the standard and adversarial recipes, and extra policies (Table I)
  kSearch,     // the fastest thresholds within a loss budget (--search)
  kOrderings,  // every metric's ordering of the candidates, cut at several points (--orderings)
};

struct ExperimentOptions {
  ModelConfig model;
  std::string corpus = kDefaultCorpus;
  std::string out_dir = "runs/experiment";
  std::string hardware = "epyc-zen3-2c";
  std::string from_checkpoint;     // a baseline checkpoint instead of training one
  int64_t baseline_steps = 300;
  int64_t profile_steps = 5;
  int64_t finetune_steps = 100;
  std::vector<double> fractions = {0.5, 0.9};  // of backward candidates, for the SQNR recipes
  std::vector<std::string> extra_policies;     // more policies to run (names or files)
  // The int8 formats every standard recipe uses (and the profile measures): bits per
  // operand and scale granularity (channel, tensor, block<N>).
  int bits = 8;
  ScaleLayout granularity;
  // Rounding of gradient operands in the thresholded recipes: sr (F+B_SR>t, F+B_SR<t,
  // the paper's) or rtn (F+B>t, F+B<t).
  std::string backward_rounding = "sr";
  // The format scheme of every recipe (support/quant_scheme.h): int8 (with bits and
  // granularity above), or an FP8/MX one (fp8: e4m3 operands, e5m2 gradients), profiled
  // in that format and run emulated; `hardware` must run it natively.
  Scheme scheme = Scheme::kInt8;
  // The recipes' roofline sees `token_scale` times the profiled tokens per device (a
  // GPU's batch from a CPU profile; pgq recipe --token-scale). Statistics stay as profiled.
  double token_scale = 1.0;
  OptimizerConfig optimizer;
  int64_t eval_batches = 4;
  bool progress = true;

  // The metric the thresholds of the fixed recipes and of --search compare
  // (plan/gemm_metric.h); those beyond SQNR need profile_metrics. Unset: the default
  // (effect when the profile has its statistics, i.e. with profile_metrics; else SQNR).
  std::optional<Metric> metric;
  // Log the statistics of every metric in the profile (pgq train --profile-metrics; with
  // the GEMM results' statistics, which the `effect` metric needs). `pgq experiment`
  // sets it unless --no-profile-metrics.
  bool profile_metrics = false;

  ExperimentProtocol protocol = ExperimentProtocol::kRecipes;
  // kOrderings (Fig. 2, app/orderings.h): the candidates of
  // `ordering_direction` (bwd | fwd; the other direction stays f32) cut at each point
  // (fractions of the candidates, and all of them) in every metric's order (those
  // listed; empty: all the profile can give), the adversarial one, `random_orderings`
  // random ones, and with pareto_steps > 0 a Pareto estimate from runs of that many steps
  // quantizing one candidate each.
  std::string ordering_direction = "bwd";
  std::vector<double> ordering_points = {0.25, 0.5, 0.75};
  std::vector<Metric> ordering_metrics;
  int64_t random_orderings = 5;
  int64_t pareto_steps = 0;

  // kSearch:
  double loss_budget = 0.01;    // relative to the baseline's loss
  int64_t trial_steps = 60;
};

struct ExperimentResult {
  std::string report_path;
  std::string table_path;
};

// Throws pgq::Error for bad options (outside their ranges in support/option_ranges.h,
// conflicting, unknown policies) or a model too large for this machine's memory,
// before writing anything, or when the folder holds an experiment made with other
// options.
ExperimentResult runExperiment(const ExperimentOptions& options);

}  // namespace pgq
