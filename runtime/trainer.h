#pragma once
// The training loop: AdamW with linear warmup, cosine decay and global-norm gradient
// clipping; a batch sampler over a text corpus's tokens (bytes or SentencePiece,
// runtime/corpus_tokens.h) with a held-out validation split; periodic evaluation (loss
// and bits per byte); a metrics CSV; atomic checkpoints that resume bit-exactly (same
// seed, same thread count).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "frontend/model_config.h"
#include "frontend/transformer.h"
#include "passes/training_pipeline.h"
#include "plan/profile.h"
#include "plan/scaling_strategies.h"
#include "runtime/corpus.h"
#include "runtime/corpus_tokens.h"
#include "runtime/collectives.h"
#include "runtime/executor.h"

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
  bool profile_outputs = false;  // also profile each GEMM's result
  // Also the statistics of the metrics beyond SQNR (plan/gemm_metric.h): bias-aware
  // SQNRs, output errors, reach (`pgq train --profile-metrics`).
  bool profile_metrics = false;
  // Formats to profile besides int8 per-channel (which is always measured): these bits
  // and granularity ("tensor", "channel", "block64"), with the 7-bit variant where the
  // CPU needs it and stochastic rounding for gradients.
  int profile_bits = 8;
  std::string profile_granularity = "channel";
  // Also these FP8/MX schemes (plan/policy.h: fp8, fp8_e4m3, mxfp8, mxint8, moss_fp8: each
  // adds its operand format with round-to-nearest and its gradient format with both
  // roundings) or explicit formats ("e4m3:channel:rtn").
  std::vector<std::string> profile_formats;
  // Amax history length H with which the profile measures delayed scaling
  // (ScalingStats, plan/profile.h).
  int64_t profile_amax_history = kDefaultAmaxHistory;

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

struct StepRecord {
  int64_t step = 0;  // 1-based: the number of optimizer steps done
  double loss = 0;
  std::optional<double> val_loss;
  std::optional<double> val_bpb;  // bits per byte, measured with val_loss
  double lr = 0;
  double grad_norm = 0;
  double step_ms = 0;
};

// Kernel time of one node, summed over the steps that were timed.
struct OpTiming {
  std::string node;   // IR value name
  Op op;
  std::string label;  // GEMM label, empty for other ops
  double flops = 0;   // per call, GEMMs only
  double total_ms = 0;
  int64_t calls = 0;
};

struct TrainResult {
  std::vector<StepRecord> history;  // the steps this call ran (after a resume: from there)
  std::optional<double> final_val_loss;
  std::optional<double> final_val_bpb;
  MemoryStats memory;               // of the training executor
  std::vector<OpTiming> op_profile;           // the plain training steps
  std::vector<OpTiming> profiled_op_profile;  // the stage (i) steps, when any were logged
  std::string checkpoint_path;
  std::string metrics_path;
  std::string profile_path;      // set when a profile was written
  // Collectives of this process per training step, measured over the steps after the
  // first (all zero in one process).
  double collective_bytes_per_step = 0;
  double collective_ms_per_step = 0;
  double collective_calls_per_step = 0;
  double profile_write_ms = 0;
  // From train()'s start to the first step's: checks, graphs and their compilation,
  // memory, parameters (an imported model's weights), a resumed checkpoint.
  double setup_ms = 0;
};

// The formats stage (i) profiles on this CPU: the int8 per-channel formats that run
// exactly (the 7-bit variant too without VNNI), plus the same for the requested bits
// and granularity; round-to-nearest for every operand and stochastic rounding for
// gradients. With profile_metrics, the output errors' format pairs (operand, gradient):
// for the requested bits and granularity, and for int8 per channel, at the width both
// operands may have on this CPU (7 bits without VNNI), (rtn, rtn) and (rtn, sr); for
// each FP8/MX scheme of profile_formats its operand format with its gradient format in
// either rounding.
ProfileFormats profileFormats(const TrainOptions& options);

// The training pipeline (passes/training_pipeline.h) of a run with `options`:
// `instrument` adds stage (i)'s statistics nodes in profileFormats(options), a recipe
// stage (iii)'s int8 rewrite, a hardware model the roofline estimates.
TrainingPipelineOptions trainingPipelineOptions(const TrainOptions& options, bool instrument,
                                                const Recipe* recipe = nullptr,
                                                const HardwareModel* hardware = nullptr);

// One evaluation over the fixed validation batches. Bits per byte: the targets' summed
// loss in bits over the bytes of text those targets stand for (Tokenizer::pieceBytes),
// which compares models with different tokenizers; loss / ln 2 for a byte-level model.
struct Evaluation {
  double loss = 0;           // mean loss per token (nats)
  double bits_per_byte = 0;
};

// The state of a training run that is not about bookkeeping: the corpus, the
// training and evaluation graphs with their executors, parameters and AdamW moments.
// train() drives it with metrics, checkpoints and a progress bar; benchmarks call
// step() directly.
class TrainingSession {
 public:
  // Checks the options and the model's estimated memory, loads and checks the corpus,
  // builds and compiles both graphs (refusing a memory plan larger than the memory
  // available, before allocating it), initializes the parameters from the model seed.
  explicit TrainingSession(const TrainOptions& options);
  ~TrainingSession();

  // One optimizer step: sample batch `step` (0-based), forward, backward, clip, AdamW.
  // With `profile`, the step runs the instrumented graph and its statistics are
  // collected (the numerics are the same). Throws pgq::Error when the loss or
  // gradient norm is not finite (before touching the parameters).
  StepRecord step(int64_t step, bool profile = false);
  // The profile of the steps run with profile = true so far; `plain_step_ms` is the
  // measured time of an uninstrumented step (0 when unknown). In a job of several
  // processes every one calls it and gets all their statistics, unless
  // `this_process_only` (then it is local).
  Profile profile(double plain_step_ms = 0, bool this_process_only = false) const;
  Executor& instrumentedExecutor();
  // The instrumented executor if a profiled step built it, else null.
  const Executor* instrumentedExecutorIfBuilt() const;
  Evaluation evaluate();

  const Corpus& corpus() const;
  const CorpusTokens& corpusTokens() const;
  std::string recipeName() const;  // empty without a recipe
  const TransformerGraph& trainingGraph() const;
  Executor& executor();
  // Parameters and moments as named tensors (checkpoint order), and back.
  std::vector<std::pair<std::string, Tensor>> state() const;
  void loadState(std::vector<std::pair<std::string, Tensor>> tensors, const std::string& source);
  std::vector<std::pair<std::string, TensorType>> stateTypes() const;
  // Bytes the session holds: parameters, AdamW moments, the batch and the buffers of its
  // executors (what the memory check compared with the available memory).
  double plannedBytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Throws pgq::Error for bad inputs (corpus, checkpoint, options outside their ranges in
// support/option_ranges.h, a model too large for this machine's memory), before
// writing anything, and when the loss becomes NaN/Inf (the message names the step;
// the last good checkpoint is kept).
TrainResult train(const TrainOptions& options);

// Throws pgq::Error naming checkpoint `path` and every field that differs when the model
// config a checkpoint was trained with (`checkpoint_config`, its YAML) is not `model`'s:
// a run continued from it (`same_run`, --resume) may change only tensor_parallel, a new
// run from it (--init-from, pgq experiment --from-checkpoint) also batch and seed.
void checkCheckpointModel(const std::string& checkpoint_config, const ModelConfig& model, const std::string& path,
                          bool same_run);

}  // namespace pgq
