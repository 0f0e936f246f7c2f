#include "runtime/train_options.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numbers>

#include <fmt/format.h>

#include "plan/policy.h"
#include "plan/profile.h"
#include "runtime/memory_estimate.h"
#include "runtime/run_layout.h"
#include "support/errors.h"
#include "support/file_io.h"
#include "support/option_ranges.h"

namespace pgq {

double learningRate(const OptimizerConfig& opt, int64_t step, int64_t total) {
  if (step < opt.warmup) return opt.lr * static_cast<double>(step + 1) / static_cast<double>(opt.warmup);
  int64_t decay_steps = std::max<int64_t>(1, total - opt.warmup);
  double progress = std::min(1.0, static_cast<double>(step - opt.warmup) / static_cast<double>(decay_steps));
  double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return opt.lr * (opt.min_lr_ratio + (1.0 - opt.min_lr_ratio) * cosine);
}

void validateOptimizerConfig(const OptimizerConfig& opt) {
  using namespace ranges;
  kLr.check(opt.lr);
  kWarmup.check(opt.warmup);
  kMinLrRatio.check(opt.min_lr_ratio);
  kWeightDecay.check(opt.weight_decay);
  kGradClip.check(opt.grad_clip);
  kBeta1.check(opt.beta1);
  kBeta2.check(opt.beta2);
  kAdamEps.check(opt.eps);
}

std::string precisionName(Precision p) { return p == Precision::kBf16 ? "bf16" : "f32"; }

void checkOutOfCorpus(const std::string& flag, const std::string& out, const std::string& corpus) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (corpus.empty() || out.empty() || !fs::is_directory(corpus, ec)) return;
  if (fs::weakly_canonical(out, ec) == fs::weakly_canonical(corpus, ec) && !ec)
    throw Error(fmt::format("{} {} is the --corpus folder: the files pgq writes there (metrics.csv, ...) would be read "
                            "as corpus text when it runs again; give another folder",
                            flag, out));
}

void validateTrainOptions(const TrainOptions& o) {
  using namespace ranges;
  checkOutOfCorpus("--out", o.out_dir, o.corpus);
  kSteps.check(o.steps);
  kStopAfter.check(o.stop_after);
  kEvalEvery.check(o.eval_every);
  kEvalBatches.check(o.eval_batches);
  kCheckpointEvery.check(o.checkpoint_every);
  kLogEvery.check(o.log_every);
  validateOptimizerConfig(o.optimizer);
  kWarmup.check(o.optimizer.warmup, o.steps);
  kProfileBits.check(o.profile.bits);
  kProfileAmaxHistory.check(o.profile_amax_history);
  kProfileSteps.check(o.profile_steps, o.steps);
  kProfileWarmup.check(o.profile_warmup, o.steps);
  // Both are at most --steps, itself at most kMaxSteps: the sum cannot overflow.
  if (o.profile_warmup + o.profile_steps > o.steps)
    throw Error(fmt::format("--profile-warmup {} + --profile-steps {} exceed --steps {}", o.profile_warmup,
                            o.profile_steps, o.steps));
}

void checkEstimatedMemory(const TrainOptions& o) {
  checkTrainingMemory(o.model, estimateTrainingMemory(o.model, o.eval_batches, o.profile_steps > 0),
                      availableMemoryBytes());
}

void checkSessionOptions(const TrainOptions& o) {
  validateTrainOptions(o);
  const std::string& config = o.model.source.empty() ? o.model.name : o.model.source;
  // An imported model is fed bytes: every token id up to 255 must have a row.
  if (o.model.imported() && o.model.vocab < 256)
    throw Error(fmt::format("model {}: a vocabulary of {} tokens cannot hold the 256 byte values pgq trains on; "
                            "export the model with a vocabulary of at least 256",
                            config, o.model.vocab));
  if (!o.model.imported() && o.model.tokenizer == TokenizerKind::kBytes && o.model.vocab != 256)
    throw Error(fmt::format("model {}: field 'vocab' is {}, but tokenizer bytes has exactly 256 tokens; set vocab "
                            "to 256, or tokenizer to sentencepiece",
                            config, o.model.vocab));
  // An imported model has no closed-form estimate; its executors' plans are checked.
  if (!o.model.imported()) checkEstimatedMemory(o);
}

const char* profileFlagSet(const TrainOptions& o) {
  const TrainOptions defaults;
  return o.profile_flag_given                                                  ? o.profile_flag_given
         : !o.profile.candidates.empty()                                         ? "--profile-formats"
         : o.profile.metrics                                                   ? "--profile-metrics"
         : o.profile.outputs                                                   ? "--profile-outputs"
         : o.profile.bits != defaults.profile.bits                             ? "--profile-bits"
         : o.profile.granularity.text() != defaults.profile.granularity.text() ? "--profile-granularity"
         : o.profile_amax_history != defaults.profile_amax_history             ? "--profile-amax-history"
         : o.profile_warmup != defaults.profile_warmup                         ? "--profile-warmup"
                                                                               : nullptr;
}

void checkProfileOptions(const TrainOptions& o) {
  if (o.profile_steps == 0) {
    // The flags that say what a profile records mean nothing without one.
    if (const char* orphan = profileFlagSet(o))
      throw Error(fmt::format("{} says what a profile records: give --profile-steps N and --profile-out FILE too",
                              orphan));
  }
  if (o.profile_steps == 0 && o.profile_out.empty()) return;
  if (o.profile_out.empty()) throw Error("--profile-steps needs --profile-out FILE");
  if (o.profile_steps == 0)
    throw Error(fmt::format("--profile-steps must be >= 1 to write {}, got 0", o.profile_out));
  // Fail now, not after training, when the profile or the CSV beside it cannot be
  // written, or would replace a file the run reads (--profile-out naming the model).
  checkFileWithSidecar("--profile-out", o.profile_out, profileCsvPath(o.profile_out));
  OutputPlan plan;
  for (const std::string* input : {&o.model.source, &o.model.onnx, &o.corpus, &o.recipe_path, &o.hardware, &o.init_from})
    if (!input->empty()) plan.reads(*input);
  if (!o.model.onnx.empty()) plan.reads(o.model.onnx + ".params.txt");
  plan.writesWithSidecar("--profile-out", o.profile_out, profileCsvPath(o.profile_out));
  plan.check();
  // The run's own files in --out, which may not exist yet (OutputPlan checks existing
  // folders): a profile written over the checkpoint lost it, over metrics.csv lost the
  // metrics, over .pgq-lock let a second run in.
  namespace fs = std::filesystem;
  const fs::path out = fs::weakly_canonical(o.out_dir);
  const RunLayout run{o.out_dir};
  for (const std::string& path : {o.profile_out, profileCsvPath(o.profile_out)}) {
    const fs::path p = fs::weakly_canonical(path);
    if (p == out)
      throw Error(fmt::format("--profile-out {}: {} is the run folder (--out {}); give a file's path", o.profile_out,
                              path, o.out_dir));
    for (const std::string& own : {run.checkpoint(), run.metrics(), run.lock()})
      if (p == fs::weakly_canonical(own))
        throw Error(fmt::format("--profile-out {}: {} is the run's own {} (--out {}); give another path",
                                o.profile_out, path, fs::path(own).filename().string(), o.out_dir));
  }
}

}  // namespace pgq
