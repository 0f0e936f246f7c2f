#pragma once
// The training loop: AdamW with linear warmup, cosine decay and global-norm gradient
// clipping (runtime/train_options.h); a batch sampler over a text corpus's tokens
// (bytes or SentencePiece, runtime/corpus_tokens.h) with a held-out validation split;
// periodic evaluation (loss and bits per byte); a metrics CSV; atomic checkpoints that
// resume bit-exactly (same seed, same thread count). The run folder's files are named in
// runtime/run_layout.h; the graphs, executors and parameters live in the session
// (runtime/training_session.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/executor.h"
#include "runtime/train_options.h"
#include "runtime/training_session.h"

namespace pgq {

// Kernel time of one node, summed over the steps that were timed.
struct OpTiming {
  std::string node;   // IR value name
  Op op;
  // What its kernel does: the op's name, with "+quantize" where it also makes
  // quantizations (an attention's softmax, CpuBackend::planItemQuantizations).
  std::string kind;
  std::string label;  // GEMM label, empty for other ops
  double flops = 0;   // per call, GEMMs only
  std::string dtype;  // GEMMs: what they multiply (int8, bf16, f32)
  double bytes = 0;   // per call: the operands' and the result's bytes (a lower bound on the traffic; an in-place
                      // scatter add: its updates, indices and the rows they touch, at most), and those of
                      // the results it also makes
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
  // The plain training steps' time outside the graph's kernels, per step (StepRecord's
  // norm_ms, update_ms, weight_copies averaged over `optimizer_steps` steps).
  double norm_ms_per_step = 0;
  double update_ms_per_step = 0;
  int64_t weight_copies_per_step = 0;
  int64_t optimizer_steps = 0;
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
