#pragma once
// What a training run is asked to do (pgq train's flags, pgq experiment's runs), and the
// checks that refuse bad options before any work: every number within its range
// (support/option_ranges.h), the flags that go together, the model against the tokenizer
// and against this machine's memory.
#include <cstdint>
#include <string>
#include <vector>

#include "frontend/model_config.h"
#include "passes/training_pipeline.h"
#include "plan/scaling_strategies.h"
#include "runtime/collectives.h"

namespace pgq {

inline constexpr const char* kDefaultCorpus = "/usr/share/games/fortunes";

struct OptimizerConfig {
  double lr = 1e-3;            // peak learning rate
  double min_lr_ratio = 0.1;   // cosine decays to lr * min_lr_ratio
  int64_t warmup = 100;        // linear warmup steps
  double weight_decay = 0.1;   // decoupled; applied to matrices only (rank >= 2)
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;      // global L2 norm; 0 disables clipping
};

// Learning rate of (0-based) step `step` of `total`.
double learningRate(const OptimizerConfig& opt, int64_t step, int64_t total);

// Throws pgq::Error for a value outside its range (support/option_ranges.h); train()
// also checks the warmup against the run's steps.
void validateOptimizerConfig(const OptimizerConfig& optimizer);

struct TrainOptions {
  ModelConfig model;
  std::string corpus = kDefaultCorpus;
  int64_t steps = 1000;          // total steps of the run (the lr schedule spans them)
  int64_t stop_after = 0;        // > 0: stop (with a checkpoint) after this many steps of
                                 // this call, e.g. to fit a time slot; --resume continues
  OptimizerConfig optimizer;
  int64_t eval_every = 100;     // 0: only at the end
  int64_t eval_batches = 8;
  int64_t checkpoint_every = 0; // 0: only at the end
  std::string out_dir = "runs/train";
  bool resume = false;
  // Start a new run (in out_dir) from another run's checkpoint: its weights, optimizer
  // moments and step, so the data order continues; the recipe may differ (fine-tuning
  // a baseline with a quantization recipe), and so may the batch size and the seed
  // (then the data order and the rounding noise are the new seed's).
  std::string init_from;
  Precision precision = Precision::kF32;
  bool progress = true;
  int64_t log_every = 50;       // progress line period when stderr is not a terminal
  bool profile_ops = false;     // time every kernel (per-op time split)

  // Stage (i): log GEMM operand statistics during steps [profile_warmup,
  // profile_warmup + profile_steps) and write them to profile_out (+ .csv).
  int64_t profile_steps = 0;
  int64_t profile_warmup = 0;
  std::string profile_out;
  // What to profile besides int8 per channel: these bits and scales, with the 7-bit
  // variant where the CPU needs it and stochastic rounding for gradients; FP8/MX schemes
  // and single formats; each GEMM's result (`outputs`); the statistics of the metrics
  // beyond SQNR (plan/gemm_metric.h: bias-aware SQNRs, output errors, reach;
  // `pgq train --profile-metrics`). profileRequest() turns it into the formats.
  ProfileAsk profile;
  // Amax history length H with which the profile measures delayed scaling
  // (ScalingStats, plan/profile.h).
  int64_t profile_amax_history = kDefaultAmaxHistory;
  // The first of those flags given on the command line, set by the CLI: one given at its
  // default value is as out of place without a profile as any other.
  const char* profile_flag_given = nullptr;

  // Stage (iii): train with the GEMMs the recipe chooses in int8, as the recipe says.
  // The hardware model (optional) is checked to run the recipe's formats exactly and
  // annotates GEMMs with roofline estimates. Evaluation runs the weights in high
  // precision.
  std::string recipe_path;
  std::string hardware;

  // The job's processes (runtime/collectives.h; not owned), or null for one process.
  // model.tensor_parallel devices split the model (it must equal the tp group's size);
  // the D = processes / T data-parallel replicas each take model.batch / D rows of the
  // global batch, so a run's numbers do not depend on D. Rank 0 writes every file.
  Collectives* collectives = nullptr;
};

// "f32" or "bf16", as checkpoints, profiles and metrics write it.
std::string precisionName(Precision precision);

// Every numeric option within its range and consistent with the others. Reads and
// writes nothing.
void validateTrainOptions(const TrainOptions& options);

// What a session needs besides the ranges: a tokenizer the model's vocabulary fits, and
// (a built-in model) an estimated memory within what this machine has available.
void checkSessionOptions(const TrainOptions& options);

// Refuses, before any graph is built, a built-in model whose estimated memory exceeds
// what this machine has available.
void checkEstimatedMemory(const TrainOptions& options);

// The first flag of stage (i) given on the command line or whose value differs from its
// default (one that says what a profile records, or --profile-warmup), or nullptr.
const char* profileFlagSet(const TrainOptions& options);

// The stage (i) flags: a granularity pgq knows, --profile-steps with --profile-out, no
// flag saying what a profile records without a profile, and a profile (and the CSV
// beside it) that can be written.
void checkProfileOptions(const TrainOptions& options);

// Refuses an output folder `out` (named by `flag`) that is the corpus folder `corpus`: a
// folder corpus reads every text file in it, the run's own files included.
void checkOutOfCorpus(const std::string& flag, const std::string& out, const std::string& corpus);

}  // namespace pgq
