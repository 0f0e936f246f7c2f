#include "runtime/trainer.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <numbers>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "ir/errors.h"
#include "kernels/optim.h"
#include "passes/pipeline.h"
#include "runtime/checkpoint.h"
#include "runtime/corpus.h"
#include "runtime/data_loader.h"
#include "runtime/metrics.h"
#include "runtime/param_init.h"
#include "runtime/progress.h"

namespace pgq {

double learningRate(const OptimizerConfig& opt, int64_t step, int64_t total) {
  if (step < opt.warmup) return opt.lr * static_cast<double>(step + 1) / static_cast<double>(opt.warmup);
  int64_t decay_steps = std::max<int64_t>(1, total - opt.warmup);
  double progress = std::min(1.0, static_cast<double>(step - opt.warmup) / static_cast<double>(decay_steps));
  double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return opt.lr * (opt.min_lr_ratio + (1.0 - opt.min_lr_ratio) * cosine);
}

namespace {

constexpr const char* kCheckpointFile = "checkpoint.pgqckpt";
constexpr const char* kMetricsFile = "metrics.csv";

void runPasses(Graph& graph, const TrainOptions& options) {
  std::string passes = "cse,dce";
  if (options.precision == Precision::kBf16) passes = "bf16_gemms," + passes;
  PassContext ctx;
  parsePipeline(passes)->run(graph, ctx);
}

class Trainer {
 public:
  explicit Trainer(const TrainOptions& options) : o_(options) {}
  TrainResult run();

 private:
  void buildGraphs();
  void startFresh();
  void resumeFromCheckpoint();
  double evaluate();
  void saveCheckpointAt(int64_t step);
  void optimizerStep(int64_t step, double lr, double grad_norm);
  double gradNorm() const;

  const TrainOptions& o_;
  Corpus corpus_;
  TransformerGraph train_;
  TransformerGraph eval_;
  std::unique_ptr<Executor> train_exec_;
  std::unique_ptr<Executor> eval_exec_;
  std::vector<Tensor> params_, m_, v_;
  Tensor tokens_, targets_;
  int64_t start_step_ = 0;
  std::string checkpoint_path_;
  std::optional<int64_t> last_checkpoint_step_;
};

void Trainer::buildGraphs() {
  train_ = buildTransformer(o_.model);
  appendBackward(*train_.graph, train_.loss, train_.params);
  runPasses(*train_.graph, o_);
  eval_ = buildTransformer(o_.model);
  runPasses(*eval_.graph, o_);
  ExecutorOptions exec_options;
  exec_options.profile = o_.profile_ops;
  train_exec_ = std::make_unique<Executor>(*train_.graph, exec_options);
  eval_exec_ = std::make_unique<Executor>(*eval_.graph);

  for (Node* p : train_.params) {
    params_.emplace_back(p->type());
    m_.emplace_back(p->type());
    v_.emplace_back(p->type());
  }
  tokens_ = Tensor(train_.tokens->type());
  targets_ = Tensor(train_.targets->type());
  for (size_t i = 0; i < train_.params.size(); ++i) {
    train_exec_->bind(train_.params[i], params_[i]);
    eval_exec_->bind(train_.params[i]->name(), params_[i]);
  }
  train_exec_->bind(train_.tokens, tokens_);
  train_exec_->bind(train_.targets, targets_);
  eval_exec_->bind(eval_.tokens, tokens_);
  eval_exec_->bind(eval_.targets, targets_);
}

void Trainer::startFresh() {
  for (size_t i = 0; i < train_.params.size(); ++i)
    initParameter(*train_.params[i], o_.model.seed, params_[i]);
}

void Trainer::resumeFromCheckpoint() {
  Checkpoint ckpt = loadCheckpoint(checkpoint_path_);
  if (ckpt.model_config != o_.model.toYaml())
    throw Error(fmt::format("{}: the checkpoint was trained with a different model config:\n{}",
                            checkpoint_path_, ckpt.model_config));
  auto fingerprint = ckpt.info.find("corpus_fingerprint");
  if (fingerprint != ckpt.info.end() && fingerprint->second != fmt::format("{:016x}", corpus_.fingerprint))
    throw Error(fmt::format("{}: the checkpoint was trained on another corpus ({}); resume with the "
                            "same --corpus",
                            checkpoint_path_, ckpt.info["corpus"]));
  auto precision = ckpt.info.find("precision");
  std::string mine = o_.precision == Precision::kBf16 ? "bf16" : "f32";
  if (precision != ckpt.info.end() && precision->second != mine)
    throw Error(fmt::format("{}: the checkpoint was trained in {} precision, not {}", checkpoint_path_,
                            precision->second, mine));
  std::vector<std::pair<std::string, TensorType>> expected;
  for (Node* p : train_.params) {
    expected.emplace_back(p->name(), p->type());
    expected.emplace_back("adam_m/" + p->name(), p->type());
    expected.emplace_back("adam_v/" + p->name(), p->type());
  }
  checkCheckpointMatches(ckpt, expected, checkpoint_path_);
  for (auto& [name, tensor] : ckpt.tensors) {
    for (size_t i = 0; i < train_.params.size(); ++i) {
      const std::string& p = train_.params[i]->name();
      if (name == p) params_[i] = std::move(tensor);
      else if (name == "adam_m/" + p) m_[i] = std::move(tensor);
      else if (name == "adam_v/" + p) v_[i] = std::move(tensor);
    }
  }
  // Tensors were replaced: bind again.
  for (size_t i = 0; i < train_.params.size(); ++i) {
    train_exec_->bind(train_.params[i], params_[i]);
    eval_exec_->bind(train_.params[i]->name(), params_[i]);
  }
  start_step_ = ckpt.step;
  last_checkpoint_step_ = ckpt.step;
  if (ckpt.threads != omp_get_max_threads())
    spdlog::warn("resuming with {} threads; the checkpoint was written with {}: results can differ "
                 "in the last bits from an uninterrupted run",
                 omp_get_max_threads(), ckpt.threads);
  auto planned = ckpt.info.find("planned_steps");
  if (planned != ckpt.info.end() && planned->second != std::to_string(o_.steps))
    spdlog::warn("the run was planned for {} steps, now --steps {}: the learning-rate schedule changes "
                 "from here on",
                 planned->second, o_.steps);
  if (start_step_ >= o_.steps)
    throw Error(fmt::format("{}: the checkpoint is already at step {}; ask for more --steps than that",
                            checkpoint_path_, start_step_));
  spdlog::info("resuming from {} at step {}", checkpoint_path_, start_step_);
}

double Trainer::evaluate() {
  BatchSampler sampler(corpus_.val, o_.model.batch, o_.model.seq_len, o_.model.seed, Split::kVal);
  EvalBatches batches = sampler.evalBatches(o_.eval_batches);
  double sum = 0;
  for (int64_t i = 0; i < batches.size(); ++i) {
    batches.fill(i, tokens_, targets_);
    eval_exec_->run();
    sum += eval_exec_->outputScalar(0);
  }
  return sum / static_cast<double>(batches.size());
}

double Trainer::gradNorm() const {
  double sum = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    std::span<const float> g = train_exec_->output<float>(i + 1);
    sum += kernels::sumSquares(g.data(), static_cast<int64_t>(g.size()));
  }
  return std::sqrt(sum);
}

void Trainer::optimizerStep(int64_t step, double lr, double grad_norm) {
  const OptimizerConfig& opt = o_.optimizer;
  float scale = 1.0f;
  if (opt.grad_clip > 0 && grad_norm > opt.grad_clip) scale = static_cast<float>(opt.grad_clip / grad_norm);
  for (size_t i = 0; i < params_.size(); ++i) {
    kernels::AdamWParams p;
    p.lr = static_cast<float>(lr);
    p.beta1 = static_cast<float>(opt.beta1);
    p.beta2 = static_cast<float>(opt.beta2);
    p.eps = static_cast<float>(opt.eps);
    p.weight_decay = params_[i].shape().rank() >= 2 ? static_cast<float>(opt.weight_decay) : 0.0f;
    p.step = step + 1;
    std::span<const float> g = train_exec_->output<float>(i + 1);
    kernels::adamwUpdate(params_[i].data<float>(), g.data(), m_[i].data<float>(), v_[i].data<float>(),
                         params_[i].numElements(), p, scale);
  }
}

void Trainer::saveCheckpointAt(int64_t step) {
  Checkpoint ckpt;
  ckpt.step = step;
  ckpt.seed = o_.model.seed;
  ckpt.threads = omp_get_max_threads();
  ckpt.model_config = o_.model.toYaml();
  ckpt.info["corpus"] = corpus_.source;
  ckpt.info["corpus_fingerprint"] = fmt::format("{:016x}", corpus_.fingerprint);
  ckpt.info["precision"] = o_.precision == Precision::kBf16 ? "bf16" : "f32";
  ckpt.info["planned_steps"] = std::to_string(o_.steps);
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string& name = train_.params[i]->name();
    ckpt.tensors.emplace_back(name, params_[i].clone());
    ckpt.tensors.emplace_back("adam_m/" + name, m_[i].clone());
    ckpt.tensors.emplace_back("adam_v/" + name, v_[i].clone());
  }
  saveCheckpoint(checkpoint_path_, ckpt);
  last_checkpoint_step_ = step;
}

TrainResult Trainer::run() {
  if (o_.steps < 1) throw Error(fmt::format("--steps must be >= 1, got {}", o_.steps));
  if (o_.stop_after < 0) throw Error(fmt::format("--stop-after must be >= 0, got {}", o_.stop_after));
  if (o_.eval_batches < 1) throw Error(fmt::format("--eval-batches must be >= 1, got {}", o_.eval_batches));
  corpus_ = loadCorpus(o_.corpus);
  checkCorpusFits(corpus_, o_.model.seq_len);
  std::error_code ec;
  std::filesystem::create_directories(o_.out_dir, ec);
  if (ec) throw Error(fmt::format("{}: cannot create the output directory: {}", o_.out_dir, ec.message()));
  checkpoint_path_ = (std::filesystem::path(o_.out_dir) / kCheckpointFile).string();
  bool have_checkpoint = std::filesystem::exists(checkpoint_path_);
  if (o_.resume && !have_checkpoint)
    throw Error(fmt::format("--resume: no checkpoint at {}", checkpoint_path_));
  if (!o_.resume && have_checkpoint)
    throw Error(fmt::format("{} already exists: pass --resume to continue that run, or choose another "
                            "--out directory",
                            checkpoint_path_));

  buildGraphs();
  if (o_.resume) resumeFromCheckpoint();
  else startFresh();

  TrainResult result;
  result.checkpoint_path = checkpoint_path_;
  result.metrics_path = (std::filesystem::path(o_.out_dir) / kMetricsFile).string();
  MetricsWriter metrics(result.metrics_path,
                        {"step", "loss", "val_loss", "lr", "grad_norm", "step_ms", "tokens_per_s"},
                        o_.resume ? std::optional<int64_t>(start_step_) : std::nullopt);
  BatchSampler sampler(corpus_.train, o_.model.batch, o_.model.seq_len, o_.model.seed, Split::kTrain);
  std::optional<ProgressBar> bar;
  if (o_.progress) bar.emplace(o_.steps, start_step_, o_.log_every);
  const double tokens = static_cast<double>(o_.model.tokens());

  const int64_t end_step = o_.stop_after > 0 ? std::min(o_.steps, start_step_ + o_.stop_after) : o_.steps;
  for (int64_t step = start_step_; step < end_step; ++step) {
    auto start = std::chrono::steady_clock::now();
    sampler.sample(step, tokens_, targets_);
    train_exec_->run(step);
    double loss = train_exec_->outputScalar(0);
    double norm = gradNorm();
    if (!std::isfinite(loss) || !std::isfinite(norm)) {
      if (bar) bar->finish();
      std::string kept = last_checkpoint_step_
                             ? fmt::format("the last good checkpoint ({}, step {}) is kept", checkpoint_path_,
                                           *last_checkpoint_step_)
                             : std::string("no checkpoint had been written yet");
      throw Error(fmt::format("step {}: the training {} is {}; stopped, {}. Try a lower --lr.", step + 1,
                              std::isfinite(loss) ? "gradient norm" : "loss",
                              std::isfinite(loss) ? norm : loss, kept));
    }
    double lr = learningRate(o_.optimizer, step, o_.steps);
    optimizerStep(step, lr, norm);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

    StepRecord record{step + 1, loss, std::nullopt, lr, norm, ms};
    bool last = step + 1 == end_step;
    if (last || (o_.eval_every > 0 && (step + 1) % o_.eval_every == 0)) record.val_loss = evaluate();
    metrics.write({{"step", record.step},
                   {"loss", loss},
                   {"val_loss", record.val_loss ? MetricsWriter::Cell(*record.val_loss) : MetricsWriter::Cell()},
                   {"lr", lr},
                   {"grad_norm", norm},
                   {"step_ms", ms},
                   {"tokens_per_s", tokens / (ms / 1000.0)}});
    if (last || (o_.checkpoint_every > 0 && (step + 1) % o_.checkpoint_every == 0)) saveCheckpointAt(step + 1);
    if (bar) bar->update({step + 1, loss, record.val_loss, tokens / (ms / 1000.0), ms});
    result.history.push_back(record);
    if (record.val_loss) result.final_val_loss = record.val_loss;
  }
  if (bar) bar->finish();
  result.memory = train_exec_->memory();
  for (const NodeProfile& p : train_exec_->profile())
    result.op_profile.push_back({p.node->name(), p.node->op(),
                                 p.node->attrs().getStringOr(AttrKey::kLabel, ""), p.total_ms, p.calls});
  return result;
}

}  // namespace

TrainResult train(const TrainOptions& options) { return Trainer(options).run(); }

}  // namespace pgq
