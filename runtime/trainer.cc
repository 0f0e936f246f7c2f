#include "runtime/trainer.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <numbers>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "frontend/autodiff.h"
#include "ir/dot_dims.h"
#include "ir/errors.h"
#include "kernels/optim.h"
#include "passes/pipeline.h"
#include "runtime/checkpoint.h"
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

std::string precisionName(Precision p) { return p == Precision::kBf16 ? "bf16" : "f32"; }

}  // namespace

struct TrainingSession::Impl {
  explicit Impl(const TrainOptions& options);

  const TrainOptions& o;
  Corpus corpus;
  TransformerGraph train;
  TransformerGraph eval;
  std::unique_ptr<Executor> train_exec;
  std::unique_ptr<Executor> eval_exec;
  std::vector<Tensor> params, m, v;
  Tensor tokens, targets;
  BatchSampler sampler;

  void bindParams();
  double gradNorm() const;
};

TrainingSession::Impl::Impl(const TrainOptions& options)
    : o(options),
      corpus(loadCorpus(options.corpus)),
      sampler(corpus.train, options.model.batch, options.model.seq_len, options.model.seed, Split::kTrain) {
  checkCorpusFits(corpus, o.model.seq_len);
  train = buildTransformer(o.model);
  appendBackward(*train.graph, train.loss, train.params);
  runPasses(*train.graph, o);
  eval = buildTransformer(o.model);
  runPasses(*eval.graph, o);
  ExecutorOptions exec_options;
  exec_options.profile = o.profile_ops;
  train_exec = std::make_unique<Executor>(*train.graph, exec_options);
  eval_exec = std::make_unique<Executor>(*eval.graph);
  for (Node* p : train.params) {
    params.emplace_back(p->type());
    initParameter(*p, o.model.seed, params.back());
    m.emplace_back(p->type());
    v.emplace_back(p->type());
  }
  tokens = Tensor(train.tokens->type());
  targets = Tensor(train.targets->type());
  bindParams();
  train_exec->bind(train.tokens, tokens);
  train_exec->bind(train.targets, targets);
  eval_exec->bind(eval.tokens, tokens);
  eval_exec->bind(eval.targets, targets);
}

void TrainingSession::Impl::bindParams() {
  for (size_t i = 0; i < train.params.size(); ++i) {
    train_exec->bind(train.params[i], params[i]);
    eval_exec->bind(train.params[i]->name(), params[i]);
  }
}

double TrainingSession::Impl::gradNorm() const {
  double sum = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    std::span<const float> g = train_exec->output<float>(i + 1);
    sum += kernels::sumSquares(g.data(), static_cast<int64_t>(g.size()));
  }
  return std::sqrt(sum);
}

TrainingSession::TrainingSession(const TrainOptions& options) : impl_(std::make_unique<Impl>(options)) {}
TrainingSession::~TrainingSession() = default;

const Corpus& TrainingSession::corpus() const { return impl_->corpus; }
const TransformerGraph& TrainingSession::trainingGraph() const { return impl_->train; }
Executor& TrainingSession::executor() { return *impl_->train_exec; }

StepRecord TrainingSession::step(int64_t step) {
  Impl& s = *impl_;
  auto start = std::chrono::steady_clock::now();
  s.sampler.sample(step, s.tokens, s.targets);
  s.train_exec->run(step);
  double loss = s.train_exec->outputScalar(0);
  double norm = s.gradNorm();
  if (!std::isfinite(loss) || !std::isfinite(norm))
    throw Error(fmt::format("step {}: the training {} is {}", step + 1,
                            std::isfinite(loss) ? "gradient norm" : "loss", std::isfinite(loss) ? norm : loss));
  const OptimizerConfig& opt = s.o.optimizer;
  double lr = learningRate(opt, step, s.o.steps);
  float scale = 1.0f;
  if (opt.grad_clip > 0 && norm > opt.grad_clip) scale = static_cast<float>(opt.grad_clip / norm);
  for (size_t i = 0; i < s.params.size(); ++i) {
    kernels::AdamWParams p;
    p.lr = static_cast<float>(lr);
    p.beta1 = static_cast<float>(opt.beta1);
    p.beta2 = static_cast<float>(opt.beta2);
    p.eps = static_cast<float>(opt.eps);
    // Decay matrices only (GPT-2 practice): not norm gains.
    p.weight_decay = s.params[i].shape().rank() >= 2 ? static_cast<float>(opt.weight_decay) : 0.0f;
    p.step = step + 1;
    std::span<const float> g = s.train_exec->output<float>(i + 1);
    kernels::adamwUpdate(s.params[i].data<float>(), g.data(), s.m[i].data<float>(), s.v[i].data<float>(),
                         s.params[i].numElements(), p, scale);
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return {step + 1, loss, std::nullopt, lr, norm, ms};
}

double TrainingSession::evaluate() {
  Impl& s = *impl_;
  BatchSampler val(s.corpus.val, s.o.model.batch, s.o.model.seq_len, s.o.model.seed, Split::kVal);
  EvalBatches batches = val.evalBatches(s.o.eval_batches);
  double sum = 0;
  for (int64_t i = 0; i < batches.size(); ++i) {
    batches.fill(i, s.tokens, s.targets);
    s.eval_exec->run();
    sum += s.eval_exec->outputScalar(0);
  }
  return sum / static_cast<double>(batches.size());
}

std::vector<std::pair<std::string, TensorType>> TrainingSession::stateTypes() const {
  std::vector<std::pair<std::string, TensorType>> types;
  for (const Node* p : impl_->train.params) {
    types.emplace_back(p->name(), p->type());
    types.emplace_back("adam_m/" + p->name(), p->type());
    types.emplace_back("adam_v/" + p->name(), p->type());
  }
  return types;
}

std::vector<std::pair<std::string, Tensor>> TrainingSession::state() const {
  const Impl& s = *impl_;
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < s.params.size(); ++i) {
    const std::string& name = s.train.params[i]->name();
    out.emplace_back(name, s.params[i].clone());
    out.emplace_back("adam_m/" + name, s.m[i].clone());
    out.emplace_back("adam_v/" + name, s.v[i].clone());
  }
  return out;
}

void TrainingSession::loadState(std::vector<std::pair<std::string, Tensor>> tensors, const std::string& source) {
  Impl& s = *impl_;
  std::vector<std::pair<std::string, TensorType>> types = stateTypes();
  PGQ_ASSERT(tensors.size() == types.size(), "{}: {} state tensors, expected {}", source, tensors.size(),
             types.size());
  for (size_t i = 0; i < s.params.size(); ++i) {
    s.params[i] = std::move(tensors[3 * i].second);
    s.m[i] = std::move(tensors[3 * i + 1].second);
    s.v[i] = std::move(tensors[3 * i + 2].second);
  }
  s.bindParams();
}

namespace {

// The bookkeeping around a session: run directory, resume, metrics, checkpoints,
// progress.
class TrainLoop {
 public:
  explicit TrainLoop(const TrainOptions& options) : o_(options) {}
  TrainResult run();

 private:
  void resume();
  void saveCheckpointAt(int64_t step);

  const TrainOptions& o_;
  std::unique_ptr<TrainingSession> session_;
  int64_t start_step_ = 0;
  std::string checkpoint_path_;
  std::optional<int64_t> last_checkpoint_step_;
};

void TrainLoop::resume() {
  Checkpoint ckpt = loadCheckpoint(checkpoint_path_);
  if (ckpt.model_config != o_.model.toYaml())
    throw Error(fmt::format("{}: the checkpoint was trained with a different model config:\n{}",
                            checkpoint_path_, ckpt.model_config));
  const Corpus& corpus = session_->corpus();
  auto fingerprint = ckpt.info.find("corpus_fingerprint");
  if (fingerprint != ckpt.info.end() && fingerprint->second != fmt::format("{:016x}", corpus.fingerprint))
    throw Error(fmt::format("{}: the checkpoint was trained on another corpus ({}); resume with the "
                            "same --corpus",
                            checkpoint_path_, ckpt.info["corpus"]));
  auto precision = ckpt.info.find("precision");
  if (precision != ckpt.info.end() && precision->second != precisionName(o_.precision))
    throw Error(fmt::format("{}: the checkpoint was trained in {} precision, not {}", checkpoint_path_,
                            precision->second, precisionName(o_.precision)));
  checkCheckpointMatches(ckpt, session_->stateTypes(), checkpoint_path_);
  // Put the tensors in the session's order.
  std::vector<std::pair<std::string, Tensor>> ordered;
  for (const auto& [name, type] : session_->stateTypes())
    for (auto& entry : ckpt.tensors)
      if (entry.first == name) ordered.emplace_back(name, std::move(entry.second));
  session_->loadState(std::move(ordered), checkpoint_path_);
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

void TrainLoop::saveCheckpointAt(int64_t step) {
  Checkpoint ckpt;
  ckpt.step = step;
  ckpt.seed = o_.model.seed;
  ckpt.threads = omp_get_max_threads();
  ckpt.model_config = o_.model.toYaml();
  ckpt.info["corpus"] = session_->corpus().source;
  ckpt.info["corpus_fingerprint"] = fmt::format("{:016x}", session_->corpus().fingerprint);
  ckpt.info["precision"] = precisionName(o_.precision);
  ckpt.info["planned_steps"] = std::to_string(o_.steps);
  ckpt.tensors = session_->state();
  saveCheckpoint(checkpoint_path_, ckpt);
  last_checkpoint_step_ = step;
}

TrainResult TrainLoop::run() {
  if (o_.steps < 1) throw Error(fmt::format("--steps must be >= 1, got {}", o_.steps));
  if (o_.stop_after < 0) throw Error(fmt::format("--stop-after must be >= 0, got {}", o_.stop_after));
  if (o_.eval_batches < 1) throw Error(fmt::format("--eval-batches must be >= 1, got {}", o_.eval_batches));
  std::error_code ec;
  std::filesystem::create_directories(o_.out_dir, ec);
  if (ec) throw Error(fmt::format("{}: cannot create the output directory: {}", o_.out_dir, ec.message()));
  checkpoint_path_ = (std::filesystem::path(o_.out_dir) / kCheckpointFile).string();
  bool have_checkpoint = std::filesystem::exists(checkpoint_path_);
  if (o_.resume && !have_checkpoint) throw Error(fmt::format("--resume: no checkpoint at {}", checkpoint_path_));
  if (!o_.resume && have_checkpoint)
    throw Error(fmt::format("{} already exists: pass --resume to continue that run, or choose another "
                            "--out directory",
                            checkpoint_path_));

  session_ = std::make_unique<TrainingSession>(o_);
  if (o_.resume) resume();

  TrainResult result;
  result.checkpoint_path = checkpoint_path_;
  result.metrics_path = (std::filesystem::path(o_.out_dir) / kMetricsFile).string();
  MetricsWriter metrics(result.metrics_path,
                        {"step", "loss", "val_loss", "lr", "grad_norm", "step_ms", "tokens_per_s"},
                        o_.resume ? std::optional<int64_t>(start_step_) : std::nullopt);
  std::optional<ProgressBar> bar;
  if (o_.progress) bar.emplace(o_.steps, start_step_, o_.log_every);
  const double tokens = static_cast<double>(o_.model.tokens());
  const int64_t end_step = o_.stop_after > 0 ? std::min(o_.steps, start_step_ + o_.stop_after) : o_.steps;

  for (int64_t step = start_step_; step < end_step; ++step) {
    StepRecord record;
    try {
      record = session_->step(step);
    } catch (const Error& e) {
      if (bar) bar->finish();
      std::string kept = last_checkpoint_step_
                             ? fmt::format("the last good checkpoint ({}, step {}) is kept", checkpoint_path_,
                                           *last_checkpoint_step_)
                             : std::string("no checkpoint had been written yet");
      throw Error(fmt::format("{}; stopped, {}. Try a lower --lr.", e.what(), kept));
    }
    bool last = step + 1 == end_step;
    if (last || (o_.eval_every > 0 && (step + 1) % o_.eval_every == 0)) record.val_loss = session_->evaluate();
    double tokens_per_s = tokens / (record.step_ms / 1000.0);
    metrics.write({{"step", record.step},
                   {"loss", record.loss},
                   {"val_loss", record.val_loss ? MetricsWriter::Cell(*record.val_loss) : MetricsWriter::Cell()},
                   {"lr", record.lr},
                   {"grad_norm", record.grad_norm},
                   {"step_ms", record.step_ms},
                   {"tokens_per_s", tokens_per_s}});
    if (last || (o_.checkpoint_every > 0 && (step + 1) % o_.checkpoint_every == 0)) saveCheckpointAt(step + 1);
    if (bar) bar->update({step + 1, record.loss, record.val_loss, tokens_per_s, record.step_ms});
    result.history.push_back(record);
    if (record.val_loss) result.final_val_loss = record.val_loss;
  }
  if (bar) bar->finish();
  result.memory = session_->executor().memory();
  for (const NodeProfile& p : session_->executor().profile()) {
    double flops = 0;
    if (p.node->op() == Op::kMatMul)
      flops = gemmSizes(p.node->operand(0)->shape(), p.node->operand(1)->shape(),
                        DotDims::fromAttrs(p.node->attrs())).flops();
    result.op_profile.push_back({p.node->name(), p.node->op(), p.node->attrs().getStringOr(AttrKey::kLabel, ""),
                                 flops, p.total_ms, p.calls});
  }
  return result;
}

}  // namespace

TrainResult train(const TrainOptions& options) { return TrainLoop(options).run(); }

}  // namespace pgq
