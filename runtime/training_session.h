#pragma once
// A training session: the corpus, the training and evaluation graphs (and stage (i)'s
// instrumented one) with their executors, the parameters and AdamW moments, over one
// process or an MPI job. train() (runtime/trainer.h) drives it with metrics,
// checkpoints and a progress bar; benchmarks call step() directly.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "frontend/model_graph.h"
#include "passes/training_pipeline.h"
#include "plan/profile.h"
#include "runtime/corpus.h"
#include "runtime/corpus_tokens.h"
#include "runtime/executor.h"
#include "runtime/train_options.h"

namespace pgq {

struct StepRecord {
  int64_t step = 0;  // 1-based: the number of optimizer steps done
  double loss = 0;
  std::optional<double> val_loss;
  std::optional<double> val_bpb;  // bits per byte, measured with val_loss
  double lr = 0;
  double grad_norm = 0;
  double step_ms = 0;
  // Parts of step_ms outside the graph's kernels: the gradient norm (sums of squares of
  // every gradient) and the optimizer's update, which also makes `weight_copies` int8
  // copies of weights for the next step's GEMMs.
  double norm_ms = 0;
  double update_ms = 0;
  int64_t weight_copies = 0;
};

// What stage (i) profiles for `options` on this CPU (plan/profile_request.h: the
// integer widths its int8 GEMM runs exactly).
ProfileRequest profileRequest(const TrainOptions& options);

// The training pipeline (passes/training_pipeline.h) of a run with `options`:
// `instrument` adds stage (i)'s statistics nodes of profileRequest(options), a recipe
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
  // The state the training and evaluation executors' kernels carry from step to step
  // (delayed scaling's amax histories, predicted weight scales; Executor::kernelStates)
  // as checkpoint tensors "kernel_state/<train|eval>/<node>", u8 [world size, bytes]:
  // every rank's (each computes its own amax), gathered. Every rank must call it.
  std::vector<std::pair<std::string, Tensor>> kernelStates() const;
  std::vector<std::pair<std::string, TensorType>> kernelStateTypes() const;
  // This rank's row of each tensor kernelStateTypes() names, saved after `steps` steps;
  // throws pgq::Error naming `source` when one does not fit its kernel. The next step's
  // predicted scales then add the bound of the update of step `steps`, as they would
  // have without the stop.
  void loadKernelStates(const std::vector<std::pair<std::string, Tensor>>& tensors, int64_t steps,
                        const std::string& source);
  // Bytes the session holds: parameters, AdamW moments, the batch and the buffers of its
  // executors (what the memory check compared with the available memory).
  double plannedBytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pgq
