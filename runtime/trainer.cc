#include "runtime/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numbers>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "frontend/autodiff.h"
#include "ir/dot_dims.h"
#include "ir/quant.h"
#include "kernels/cpu_isa.h"
#include "kernels/optim.h"
#include "passes/training_pipeline.h"
#include "plan/hardware.h"
#include "plan/policy.h"
#include "plan/recipe.h"
#include "runtime/checkpoint.h"
#include "runtime/corpus_tokens.h"
#include "runtime/data_loader.h"
#include "runtime/memory_estimate.h"
#include "runtime/metrics.h"
#include "runtime/mpi.h"
#include "runtime/param_init.h"
#include "runtime/profile_collector.h"
#include "runtime/progress.h"
#include "runtime/run_dir_lock.h"
#include "runtime/sharding.h"
#include "support/errors.h"
#include "support/file_io.h"
#include "support/hash.h"
#include "support/option_ranges.h"
#include "pgq_version.h"

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

namespace {

// The output errors measured with --profile-metrics: the integer formats at a width both
// operands may have on this CPU (without VNNI an 8 x 8-bit int8 GEMM saturates, and the
// CPU backend refuses it: 7 bits then, the narrower side of what a recipe would run
// there), round to nearest for every operand and either rounding for gradients; the
// FP8/MX schemes' formats likewise.
std::vector<FormatPair> outputPairs(const TrainOptions& o) {
  const kernels::Int8Caps& caps = kernels::int8Caps();
  std::vector<FormatPair> pairs;
  auto add = [&](const std::string& operand, const std::string& gradient) {
    FormatPair pair{operand, gradient};
    if (std::find(pairs.begin(), pairs.end(), pair) == pairs.end()) pairs.push_back(std::move(pair));
  };
  for (auto [bits, granularity] :
       {std::pair{o.profile_bits, o.profile_granularity}, std::pair{8, std::string("channel")}}) {
    const int b = std::min(bits, caps.max_bits_both);
    add(fmt::format("int{}:{}:rtn", b, granularity), fmt::format("int{}:{}:rtn", b, granularity));
    add(fmt::format("int{}:{}:rtn", b, granularity), fmt::format("int{}:{}:sr", b, granularity));
  }
  for (const std::string& item : o.profile_formats) {
    const std::optional<Scheme> scheme = parseScheme(item);
    if (!scheme || scheme == Scheme::kInt8) continue;
    SchemeFormats rtn = schemeFormats(*scheme, Rounding::kNearest, Rounding::kNearest),
                  sr = schemeFormats(*scheme, Rounding::kNearest, Rounding::kStochastic);
    add(rtn.operand.toString(), rtn.gradient.toString());
    add(rtn.operand.toString(), sr.gradient.toString());
  }
  return pairs;
}

}  // namespace

ProfileFormats profileFormats(const TrainOptions& o) {
  ProfileFormats p;
  const kernels::Int8Caps& caps = kernels::int8Caps();
  auto add = [&](int bits, const std::string& granularity) {
    std::vector<int> widths{std::min(bits, caps.max_bits_one)};
    if (widths[0] > caps.max_bits_both) widths.push_back(caps.max_bits_both);
    for (int b : widths) {
      std::string rtn = fmt::format("int{}:{}:rtn", b, granularity), sr = fmt::format("int{}:{}:sr", b, granularity);
      if (std::find(p.formats.begin(), p.formats.end(), rtn) == p.formats.end()) {
        p.formats.push_back(rtn);
        p.gradient_formats.push_back(sr);
      }
    }
  };
  add(8, "channel");
  add(o.profile_bits, o.profile_granularity);
  auto once = [](std::vector<std::string>& list, const std::string& format) {
    if (std::find(list.begin(), list.end(), format) == list.end()) list.push_back(format);
  };
  for (const std::string& item : o.profile_formats) {
    if (item == "int8") continue;  // always profiled
    if (const std::optional<Scheme> scheme = parseScheme(item)) {
      SchemeFormats rtn = schemeFormats(*scheme, Rounding::kNearest, Rounding::kNearest),
                    sr = schemeFormats(*scheme, Rounding::kNearest, Rounding::kStochastic);
      once(p.formats, rtn.operand.toString());
      once(p.gradient_formats, rtn.gradient.toString());
      once(p.gradient_formats, sr.gradient.toString());
    } else {
      once(p.formats, QuantFormat::parse(item).toString());
    }
  }
  p.outputs = o.profile_outputs;
  if (o.profile_metrics) {
    p.metrics = true;
    p.output_pairs = outputPairs(o);
  }
  return p;
}

TrainingPipelineOptions trainingPipelineOptions(const TrainOptions& o, bool instrument, const Recipe* recipe,
                                                const HardwareModel* hardware) {
  TrainingPipelineOptions p;
  p.precision = o.precision;
  if (instrument) p.profile = profileFormats(o);
  if (hardware) p.hardware = *hardware;
  if (recipe) p.recipe = *recipe;
  p.seed = o.model.seed;
  return p;
}

namespace {

constexpr const char* kCheckpointFile = "checkpoint.pgqckpt";
constexpr const char* kMetricsFile = "metrics.csv";

// Forward (with its own pipeline), backward and the training pipeline of
// trainingPipelineOptions().
// Runs the training pipeline on `t`'s graph. partition_spmd replaces every node, so the
// handles are found again by name (parameters and inputs keep theirs).
void runTrainingPipeline(TransformerGraph& t, const TrainingPipelineOptions& options) {
  std::vector<std::string> params, constants;
  for (const Node* n : t.params) params.push_back(n->name());
  for (const Node* n : t.constants) constants.push_back(n->name());
  const std::string tokens = t.tokens->name();
  const std::string targets = t.targets ? t.targets->name() : std::string();
  PassContext ctx;
  buildTrainingPipeline(options)->run(*t.graph, ctx);
  auto find = [&](const std::string& name) {
    Node* n = t.graph->find(name);
    PGQ_ASSERT(n != nullptr, "%{} is gone after the training pipeline", name);
    return n;
  };
  for (size_t i = 0; i < params.size(); ++i) t.params[i] = find(params[i]);
  for (size_t i = 0; i < constants.size(); ++i) t.constants[i] = find(constants[i]);
  t.tokens = find(tokens);
  if (!targets.empty()) t.targets = find(targets);
  t.loss = t.graph->outputs()[0];
}

TransformerGraph buildTrainingGraph(const TrainOptions& options, bool instrument, const Recipe* recipe = nullptr,
                                    const HardwareModel* hardware = nullptr, bool data_parallel = false) {
  // The instrumented graph's parameters are bound to the training graph's tensors.
  TransformerGraph t = buildModel(options.model, /*initial_values=*/!instrument);
  PassContext ctx;
  buildForwardPipeline()->run(*t.graph, ctx);
  appendBackward(*t.graph, t.loss, t.params);
  TrainingPipelineOptions p = trainingPipelineOptions(options, instrument, recipe, hardware);
  p.data_parallel = data_parallel;
  runTrainingPipeline(t, p);
  return t;
}

std::string precisionName(Precision p) { return p == Precision::kBf16 ? "bf16" : "f32"; }

// This CPU as far as int8 GEMMs go: whatever hardware model a recipe was made for, it
// trains here, so its formats must run exactly here too. Only the int8 fields are set.
HardwareModel thisCpu() {
  const kernels::Int8Caps& caps = kernels::int8Caps();
  HardwareModel cpu;
  cpu.name = fmt::format("this CPU ({})", caps.isa_name);
  cpu.vnni = caps.vnni;
  cpu.max_bits_one = caps.max_bits_one;
  cpu.max_bits_both = caps.max_bits_both;
  // FP8 and MX formats run emulated here (fake_quant + f32 GEMM): every family trains.
  cpu.formats.assign(std::begin(kFormatFamilies), std::end(kFormatFamilies));
  return cpu;
}

// Every numeric option within its range (support/option_ranges.h) and consistent with
// the others. Reads and writes nothing, so train() and TrainingSession run it before
// any work.
void validateTrainOptions(const TrainOptions& o) {
  using namespace ranges;
  kSteps.check(o.steps);
  kStopAfter.check(o.stop_after);
  kEvalEvery.check(o.eval_every);
  kEvalBatches.check(o.eval_batches);
  kCheckpointEvery.check(o.checkpoint_every);
  kLogEvery.check(o.log_every);
  validateOptimizerConfig(o.optimizer);
  kWarmup.check(o.optimizer.warmup, o.steps);
  kProfileBits.check(o.profile_bits);
  for (const std::string& item : o.profile_formats) {
    if (parseScheme(item)) continue;
    try {
      QuantFormat::parse(item);
    } catch (const Error& e) {
      throw Error(fmt::format("--profile-formats: '{}' is neither a format scheme ({}) nor a format: {}", item,
                              fmt::join(kFormatSchemes, ", "), e.what()));
    }
  }
  kProfileAmaxHistory.check(o.profile_amax_history);
  kProfileSteps.check(o.profile_steps, o.steps);
  kProfileWarmup.check(o.profile_warmup, o.steps);
  // Both are at most --steps, itself at most kMaxSteps: the sum cannot overflow.
  if (o.profile_warmup + o.profile_steps > o.steps)
    throw Error(fmt::format("--profile-warmup {} + --profile-steps {} exceed --steps {}", o.profile_warmup,
                            o.profile_steps, o.steps));
}

// Refuses, before any graph is built, a model whose estimated memory exceeds what this
// machine has available.
void checkEstimatedMemory(const TrainOptions& o) {
  checkTrainingMemory(o.model, estimateTrainingMemory(o.model, o.eval_batches, o.profile_steps > 0),
                      availableMemoryBytes());
}

const TrainOptions& checkedBeforeWork(const TrainOptions& o) {
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
  return o;
}

}  // namespace

// The job this session runs in: the given collectives, or a process of its own.
struct Job {
  explicit Job(const TrainOptions& o) {
    if (!o.collectives) owned = makeLocalCollectives();
    comm = o.collectives ? o.collectives : owned.get();
    if (comm->size(DeviceGroup::kTensor) != o.model.tensor_parallel)
      throw Error(fmt::format("model {}: tensor_parallel is {}, but this job splits the model over {} process(es); "
                              "run {} ranks per model with mpirun and --tensor-parallel {}",
                              o.model.source.empty() ? o.model.name : o.model.source, o.model.tensor_parallel,
                              comm->size(DeviceGroup::kTensor), o.model.tensor_parallel, o.model.tensor_parallel));
    replicas = comm->size(DeviceGroup::kData);
    replica = comm->rank(DeviceGroup::kData);
    if (o.model.batch % replicas != 0)
      throw Error(fmt::format("model {}: field 'batch' is {}, the global batch, which the {} data-parallel replicas "
                              "({} ranks / tensor_parallel {}) must share equally",
                              o.model.source.empty() ? o.model.name : o.model.source, o.model.batch, replicas,
                              comm->worldSize(), o.model.tensor_parallel));
    rows = {replica * (o.model.batch / replicas), o.model.batch / replicas};
  }
  // The options of this process's graphs: batch / D rows.
  TrainOptions local(const TrainOptions& o) const {
    TrainOptions l = o;
    l.model.batch = o.model.batch / replicas;
    return l;
  }
  std::unique_ptr<Collectives> owned;
  Collectives* comm = nullptr;
  int64_t replicas = 1;
  int64_t replica = 0;
  RowRange rows;
};

struct TrainingSession::Impl {
  explicit Impl(const TrainOptions& options);

  const TrainOptions& o;
  Job job;
  // lr x the AdamW step bound of the last update: how far it moved any weight element
  // (predicted weight scales add it; 0 before the first update).
  double weight_step = 0;
  TrainOptions lo;  // o with this process's share of the batch
  Corpus corpus;
  CorpusTokens corpus_tokens;
  std::optional<Recipe> recipe;
  std::optional<HardwareModel> hardware;
  TransformerGraph train;
  TransformerGraph eval;
  std::unique_ptr<Executor> train_exec;
  std::unique_ptr<Executor> eval_exec;
  // Stage (i): the same training graph with statistics nodes, built on first use.
  TransformerGraph instrumented;
  std::unique_ptr<Executor> instrumented_exec;
  std::unique_ptr<ProfileCollector> collector;
  // Wall time of the profiled steps after the first (whose kernels run for the first
  // time), and of the first.
  double profiled_ms = 0, first_profiled_ms = 0;
  int64_t profiled_steps = 0;
  std::vector<Tensor> params, m, v;
  // Each parameter's split over the tensor-parallel devices (none: whole on each).
  std::vector<std::optional<ParamSplit>> splits;
  // An imported model's constants (frozen parameters and buffers), by name.
  std::vector<std::pair<std::string, Tensor>> constants;
  Tensor tokens, targets;
  BatchSampler sampler;
  // What the memory check of each executor's plan compares: the memory available when
  // the session started, and the bytes planned so far (parameters, moments, the batch
  // and the buffers of the executors compiled before).
  std::optional<double> available_bytes = availableMemoryBytes();
  double planned_bytes = 0;

  // Options of an executor whose plan is checked against the available memory.
  ExecutorOptions executorOptions(bool profile);
  std::unique_ptr<Executor> makeExecutor(const Graph& graph, bool profile) {
    return std::make_unique<Executor>(graph, executorOptions(profile), makeCpuBackend(job.comm));
  }
  void bindParams();
  void buildInstrumented();
  void initParameters();
  double gradNorm(const Executor& exec) const;
};

TrainingSession::Impl::Impl(const TrainOptions& options)
    : o(checkedBeforeWork(options)),
      job(options),
      lo(job.local(options)),
      corpus(loadCorpus(options.corpus)),
      corpus_tokens(corpus, options.model),
      sampler(corpus_tokens.train(), options.model.batch, options.model.seq_len, options.model.seed, Split::kTrain,
              job.rows) {
  if (!o.hardware.empty()) hardware = loadHardwareModel(o.hardware);
  if (!o.recipe_path.empty()) {
    // Refuse a recipe for another model or with formats the hardware cannot run now,
    // naming its file, rather than when the graph is rewritten or the first step runs.
    recipe = loadRecipe(o.recipe_path);
    checkRecipeModel(*recipe, o.model.name, o.model.source);
    if (hardware) checkRecipeRunsExactly(*recipe, *hardware);
    checkRecipeRunsExactly(*recipe, thisCpu());
    int emulated = 0;
    for (const RecipeEntry& e : recipe->entries)
      emulated += e.decision == Decision::kQuantize && e.lhs_format.isEmulated();
    if (emulated > 0 && worldRankOrZero() == 0)
      spdlog::info("recipe {}: {} entries in FP8/MX formats run emulated on this CPU (quantize -> dequantize -> f32 "
                   "GEMM): the formats' numerics at f32 speed; the speed on the recipe's hardware ({}) is what pgq "
                   "recipe --explain estimates",
                   o.recipe_path, emulated, recipe->hardware.empty() ? "not recorded" : recipe->hardware);
  }
  const bool data_parallel = job.replicas > 1;
  try {
    train = buildTrainingGraph(lo, false, recipe ? &*recipe : nullptr, hardware ? &*hardware : nullptr, data_parallel);
  } catch (const Error& e) {
    if (!data_parallel || !o.model.imported()) throw;
    throw Error(fmt::format("{}\n(each of the {} data-parallel replicas imports the model for its {} of the {} rows "
                            "of the global batch; export it with a dynamic batch axis, e.g. scripts/export_onnx.py "
                            "--dynamic-batch)",
                            e.what(), job.replicas, lo.model.batch, o.model.batch));
  }
  eval = buildModel(lo.model, /*initial_values=*/false);  // bound to the training parameters
  PassContext ctx;
  buildForwardPipeline()->run(*eval.graph, ctx);
  TrainingPipelineOptions eval_pipeline = trainingPipelineOptions(lo, false);
  eval_pipeline.data_parallel = data_parallel;
  runTrainingPipeline(eval, eval_pipeline);
  // The parameters, their AdamW moments and the batch, allocated after the executors.
  auto bytes = [](const Node* n) {
    return static_cast<double>(n->shape().numElements()) * static_cast<double>(dtypeSize(n->dtype()));
  };
  for (const Node* p : train.params) planned_bytes += 3 * bytes(p);
  planned_bytes += 2 * bytes(train.tokens);
  train_exec = makeExecutor(*train.graph, o.profile_ops);
  eval_exec = makeExecutor(*eval.graph, false);
  initParameters();
  tokens = Tensor(train.tokens->type());
  // A model whose loss reads only the tokens (an imported logits model) has no targets.
  targets = Tensor(train.tokens->type());
  bindParams();
  train_exec->bind(train.tokens, tokens);
  eval_exec->bind(eval.tokens, tokens);
  if (train.targets) train_exec->bind(train.targets, targets);
  if (eval.targets) eval_exec->bind(eval.targets, targets);
}

// Every process initializes the whole parameter from the seed (or the imported model's
// value), takes its part, and then holds what rank 0 holds: a broadcast makes sure even
// if an imported model's file differed between machines.
void TrainingSession::Impl::initParameters() {
  for (Node* p : train.params) {
    splits.push_back(paramSplit(*p));
    Tensor whole(globalType(*p));
    if (splits.back()) {
      // initParameter checks the tensor against the node's type: give it the global one.
      Graph scratch;
      Node* global = scratch.create(Op::kParameter, {}, p->attrs(), globalType(*p), p->name());
      initParameter(*global, o.model.seed, whole, train.values.get());
    } else {
      initParameter(*p, o.model.seed, whole, train.values.get());
    }
    if (job.comm->worldSize() > 1) job.comm->broadcast(whole.raw(), static_cast<int64_t>(whole.bytes()), 0);
    params.push_back(splits.back() ? shardOf(whole, splits.back()->dim, job.comm->rank(DeviceGroup::kTensor),
                                             splits.back()->devices)
                                   : std::move(whole));
    m.emplace_back(p->type());
    v.emplace_back(p->type());
  }
  for (Node* c : train.constants) {
    constants.emplace_back(c->name(), Tensor(c->type()));
    initParameter(*c, o.model.seed, constants.back().second, train.values.get());
  }
  train.values.reset();  // an imported model's weights: the parameters hold them now
}

ExecutorOptions TrainingSession::Impl::executorOptions(bool profile) {
  ExecutorOptions options;
  options.profile = profile;
  options.before_allocation = [this](const MemoryStats& planned) {
    planned_bytes += static_cast<double>(planned.arena_bytes + planned.persistent_bytes);
    checkPlannedMemory(o.model, planned_bytes, available_bytes);
  };
  return options;
}

void TrainingSession::Impl::bindParams() {
  for (size_t i = 0; i < train.params.size(); ++i) {
    train_exec->bind(train.params[i], params[i]);
    eval_exec->bind(train.params[i]->name(), params[i]);
    if (instrumented_exec) instrumented_exec->bind(train.params[i]->name(), params[i]);
  }
  for (auto& [name, tensor] : constants) {
    train_exec->bind(name, tensor);
    eval_exec->bind(name, tensor);
    if (instrumented_exec) instrumented_exec->bind(name, tensor);
  }
}

void TrainingSession::Impl::buildInstrumented() {
  instrumented = buildTrainingGraph(lo, true, nullptr, nullptr, job.replicas > 1);
  instrumented_exec = makeExecutor(*instrumented.graph, o.profile_ops);
  instrumented_exec->bind(instrumented.tokens, tokens);
  if (instrumented.targets) instrumented_exec->bind(instrumented.targets, targets);
  collector = std::make_unique<ProfileCollector>(*instrumented.graph, o.profile_amax_history);
  bindParams();
}

// The gradients are already averaged over the replicas; a split parameter's squares
// are summed over the tensor-parallel devices, a whole one's counted once.
double TrainingSession::Impl::gradNorm(const Executor& exec) const {
  double split_sum = 0, whole_sum = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    std::span<const float> g = exec.output<float>(i + 1);
    const double squares = kernels::sumSquares(g.data(), static_cast<int64_t>(g.size()));
    (splits[i] ? split_sum : whole_sum) += squares;
    if (spdlog::should_log(spdlog::level::trace))
      spdlog::trace("gradient of {}: sum of squares {} ({})", train.params[i]->name(), squares,
                 splits[i] ? "this device's part" : "whole");
  }
  if (job.comm->size(DeviceGroup::kTensor) > 1) job.comm->allReduceSum(&split_sum, 1, DeviceGroup::kTensor);
  return std::sqrt(split_sum + whole_sum);
}

TrainingSession::TrainingSession(const TrainOptions& options) : impl_(std::make_unique<Impl>(options)) {}
TrainingSession::~TrainingSession() = default;

const Corpus& TrainingSession::corpus() const { return impl_->corpus; }
const CorpusTokens& TrainingSession::corpusTokens() const { return impl_->corpus_tokens; }
std::string TrainingSession::recipeName() const { return impl_->recipe ? impl_->recipe->name : std::string(); }
const TransformerGraph& TrainingSession::trainingGraph() const { return impl_->train; }
Executor& TrainingSession::executor() { return *impl_->train_exec; }
double TrainingSession::plannedBytes() const { return impl_->planned_bytes; }

Executor& TrainingSession::instrumentedExecutor() {
  if (!impl_->instrumented_exec) impl_->buildInstrumented();
  return *impl_->instrumented_exec;
}

const Executor* TrainingSession::instrumentedExecutorIfBuilt() const { return impl_->instrumented_exec.get(); }

Profile TrainingSession::profile(double plain_step_ms, bool this_process_only) const {
  const Impl& s = *impl_;
  PGQ_ASSERT(s.collector && s.collector->steps() > 0, "no profiled steps");
  ProfileRun run;
  run.model = s.o.model.name;
  run.model_config = s.o.model.toYaml();
  run.corpus = s.corpus.source;
  run.corpus_fingerprint = fmt::format("{:016x}", s.corpus.fingerprint);
  run.seed = s.o.model.seed;
  run.warmup_steps = s.o.profile_warmup;
  run.threads = omp_get_max_threads();
  run.precision = precisionName(s.o.precision);
  run.pgq_version = PGQ_VERSION_STRING;
  run.cpu_isa = kernels::int8Caps().isa_name;
  run.vnni = kernels::int8Caps().vnni;
  ProfileFormats formats = profileFormats(s.o);
  run.formats = formats.formats;
  run.gradient_formats = formats.gradient_formats;
  run.step_ms = plain_step_ms;
  run.metrics = s.o.profile_metrics;
  run.metrics_step_ms = s.profiled_steps > 1 ? s.profiled_ms / static_cast<double>(s.profiled_steps - 1)
                                             : s.first_profiled_ms;
  return s.collector->profile(std::move(run), this_process_only ? nullptr : s.job.comm);
}

StepRecord TrainingSession::step(int64_t step, bool profile) {
  Impl& s = *impl_;
  Executor& exec = profile ? instrumentedExecutor() : *s.train_exec;
  auto start = std::chrono::steady_clock::now();
  s.sampler.sample(step, s.tokens, s.targets);
  exec.run(step, s.weight_step);
  double loss = exec.outputScalar(0);
  double norm = s.gradNorm(exec);
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
    std::span<const float> g = exec.output<float>(i + 1);
    kernels::adamwUpdate(s.params[i].data<float>(), g.data(), s.m[i].data<float>(), s.v[i].data<float>(),
                         s.params[i].numElements(), p, scale);
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // The update just applied moved each weight element by at most about lr (exactly: lr
  // x adamUpdateBound): what the profile's predicted weight scales add to this step's
  // absmax to predict the next one's.
  s.weight_step = lr * adamUpdateBound(opt.beta1, opt.beta2, step + 1);
  if (profile) {
    s.collector->add(exec, WeightStepBound{lr, adamUpdateBound(opt.beta1, opt.beta2, step + 1)});
    if (s.profiled_steps++ == 0) s.first_profiled_ms = ms;
    else s.profiled_ms += ms;
  }
  StepRecord record;
  record.step = step + 1;
  record.loss = loss;
  record.lr = lr;
  record.grad_norm = norm;
  record.step_ms = ms;
  return record;
}

Evaluation TrainingSession::evaluate() {
  Impl& s = *impl_;
  BatchSampler val(s.corpus_tokens.val(), s.o.model.batch, s.o.model.seq_len, s.o.model.seed, Split::kVal,
                   s.job.rows);
  EvalBatches batches = val.evalBatches(s.o.eval_batches);
  const std::vector<uint32_t>& piece_bytes = s.corpus_tokens.tokenizer().pieceBytes();
  double loss_sum = 0, nats = 0, bytes = 0;
  for (int64_t i = 0; i < batches.size(); ++i) {
    batches.fill(i, s.tokens, s.targets);
    s.eval_exec->run();
    // The mean over the whole batch's targets (averaged over the replicas in the graph);
    // times their count, their sum.
    double loss = s.eval_exec->outputScalar(0);
    loss_sum += loss;
    nats += loss * static_cast<double>(s.targets.numElements() * s.job.replicas);
    for (int32_t target : std::span<const int32_t>(s.targets.data<int32_t>(), s.targets.numElements()))
      bytes += piece_bytes[static_cast<size_t>(target)];
  }
  if (s.job.replicas > 1) s.job.comm->allReduceSum(&bytes, 1, DeviceGroup::kData);
  return {loss_sum / static_cast<double>(batches.size()), nats / std::numbers::ln2 / bytes};
}

std::vector<std::pair<std::string, TensorType>> TrainingSession::stateTypes() const {
  std::vector<std::pair<std::string, TensorType>> types;
  for (const Node* p : impl_->train.params) {
    types.emplace_back(p->name(), globalType(*p));
    types.emplace_back("adam_m/" + p->name(), globalType(*p));
    types.emplace_back("adam_v/" + p->name(), globalType(*p));
  }
  return types;
}

std::vector<std::pair<std::string, Tensor>> TrainingSession::state() const {
  const Impl& s = *impl_;
  std::vector<std::pair<std::string, Tensor>> out;
  // The whole tensors: a split one is gathered from the tensor-parallel devices.
  auto whole = [&](size_t i, const Tensor& t) {
    return s.splits[i] ? gatherShards(t, s.splits[i]->dim, *s.job.comm) : t.clone();
  };
  for (size_t i = 0; i < s.params.size(); ++i) {
    const std::string& name = s.train.params[i]->name();
    out.emplace_back(name, whole(i, s.params[i]));
    out.emplace_back("adam_m/" + name, whole(i, s.m[i]));
    out.emplace_back("adam_v/" + name, whole(i, s.v[i]));
  }
  return out;
}

void TrainingSession::loadState(std::vector<std::pair<std::string, Tensor>> tensors, const std::string& source) {
  Impl& s = *impl_;
  std::vector<std::pair<std::string, TensorType>> types = stateTypes();
  PGQ_ASSERT(tensors.size() == types.size(), "{}: {} state tensors, expected {}", source, tensors.size(),
             types.size());
  // Whole tensors in, this device's parts kept.
  const int64_t rank = s.job.comm->rank(DeviceGroup::kTensor);
  auto part = [&](size_t i, Tensor& t) {
    return s.splits[i] ? shardOf(t, s.splits[i]->dim, rank, s.splits[i]->devices) : std::move(t);
  };
  for (size_t i = 0; i < s.params.size(); ++i) {
    s.params[i] = part(i, tensors[3 * i].second);
    s.m[i] = part(i, tensors[3 * i + 1].second);
    s.v[i] = part(i, tensors[3 * i + 2].second);
  }
  s.bindParams();
}

namespace {

// The learning-rate schedule computes with steps as doubles: beyond 2^53 they are no
// longer exact, and no run comes near it.
constexpr int64_t kMaxPlannedSteps = int64_t{1} << 53;

}  // namespace

void checkCheckpointModel(const std::string& checkpoint_config, const ModelConfig& model, const std::string& path,
                          bool same_run) {
  // Checkpoints hold whole tensors: the device layout (tensor_parallel) may change
  // between runs, and so may the number of data-parallel replicas (batch is global). A
  // new run from a checkpoint (--init-from) may also change batch and seed.
  const std::vector<std::string_view> free =
      same_run ? std::vector<std::string_view>{"tensor_parallel"}
               : std::vector<std::string_view>{"batch", "seed", "tensor_parallel"};
  // Top-level `key: value` lines of each config (a nested value is compared as its lines).
  auto fields = [&](const std::string& yaml) {
    std::map<std::string, std::string> out;
    std::istringstream lines(yaml);
    std::string key;
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] == '#') continue;
      if (line[0] != ' ' && line[0] != '-') {
        const size_t colon = line.find(':');
        key = line.substr(0, colon);
        out[key] = colon == std::string::npos ? "" : line.substr(std::min(line.size(), colon + 2));
      } else {
        out[key] += "\n" + line;
      }
    }
    for (std::string_view k : free) out.erase(std::string(k));
    return out;
  };
  const auto theirs = fields(checkpoint_config), ours = fields(model.toYaml());
  std::vector<std::string> differences;
  for (const auto& [key, value] : theirs) {
    auto it = ours.find(key);
    if (it == ours.end()) differences.push_back(fmt::format("{} is {} there, not set here", key, value));
    else if (it->second != value) differences.push_back(fmt::format("{} is {} there, {} here", key, value, it->second));
  }
  for (const auto& [key, value] : ours)
    if (!theirs.count(key)) differences.push_back(fmt::format("{} is not set there, {} here", key, value));
  if (differences.empty()) return;
  for (std::string& d : differences) std::replace(d.begin(), d.end(), '\n', ' ');
  throw Error(fmt::format("{}: the checkpoint was trained with another model config ({}): {}", path,
                          same_run ? "only tensor_parallel may change when a run continues"
                                   : "only batch, seed and tensor_parallel may change in a new run from it",
                          fmt::join(differences, "; ")));
}

namespace {

// The checkpoint fields that only this run can judge (the reader checked the rest):
// a forged or foreign checkpoint can carry a valid checksum around values no run of
// this config could have written. Returns the planned steps, when recorded.
std::optional<int64_t> checkRunFields(const Checkpoint& ckpt, const TrainOptions& o, const std::string& path,
                                      bool same_run) {
  if (same_run && ckpt.seed != o.model.seed)
    throw Error(fmt::format("checkpoint {}: field 'seed' is {}, but this run's seed is {} (the model config's "
                            "`seed`, or --seed); a run continues only with the seed it was trained with (a new run "
                            "from it, --init-from, may change it)",
                            path, ckpt.seed, o.model.seed));
  auto precision = ckpt.info.find("precision");
  if (precision != ckpt.info.end() && precision->second != "f32" && precision->second != "bf16")
    throw Error(fmt::format("checkpoint {}: field 'precision' is '{}', expected f32 or bf16", path,
                            precision->second));
  auto planned = ckpt.info.find("planned_steps");
  if (planned == ckpt.info.end()) return std::nullopt;
  const std::string& text = planned->second;
  int64_t steps = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), steps);
  if (ec != std::errc() || end != text.data() + text.size() || steps < 1 || steps > kMaxPlannedSteps)
    throw Error(fmt::format("checkpoint {}: field 'planned_steps' is '{}', expected an integer in [1, 2^53]", path,
                            text));
  if (ckpt.step > steps)
    throw Error(fmt::format("checkpoint {}: field 'step' is {}, past the run's planned_steps {}", path, ckpt.step,
                            steps));
  return steps;
}

// The bookkeeping around a session: run directory, resume, metrics, checkpoints,
// progress.
// Kernel time per node of an executor's timed runs (TrainOptions::profile_ops).
std::vector<OpTiming> opTimings(const Executor& exec) {
  std::vector<OpTiming> timings;
  for (const NodeProfile& p : exec.profile()) {
    double flops = 0;
    if (p.node->op() == Op::kMatMul || p.node->op() == Op::kQMatMul)
      flops = gemmSizes(p.node->operand(0)->shape(), p.node->operand(1)->shape(),
                        DotDims::fromAttrs(p.node->attrs())).flops();
    timings.push_back({p.node->name(), p.node->op(), p.node->attrs().getStringOr(AttrKey::kLabel, ""), flops,
                       p.total_ms, p.calls});
  }
  return timings;
}

class TrainLoop {
 public:
  explicit TrainLoop(const TrainOptions& options) : o_(options) {}
  TrainResult run();

 private:
  void checkProfileOptions() const;
  // Loads a checkpoint's state after checking it fits this run; `same_run` also
  // requires the same recipe (a resume, as opposed to --init-from).
  void loadFrom(const std::string& path, bool same_run);
  bool profiling(int64_t step) const {
    return o_.profile_steps > 0 && step >= o_.profile_warmup && step < o_.profile_warmup + o_.profile_steps;
  }
  void resume();
  void saveCheckpointAt(int64_t step);
  void checkRanksAgree() const;
  // Rank 0's part of loadFrom: the checkpoint's whole tensors in the session's order.
  std::vector<std::pair<std::string, Tensor>> readCheckpoint(const std::string& path, bool same_run);
  void finishLoadChecks(const std::string& path, bool same_run);
  int worldSize() const { return o_.collectives ? o_.collectives->worldSize() : 1; }

  const TrainOptions& o_;
  // Rank 0 (or the only process) checks and writes the run's files; the others compute.
  const bool lead_ = o_.collectives == nullptr || o_.collectives->worldRank() == 0;
  std::unique_ptr<TrainingSession> session_;
  std::string recipe_text_;  // the recipe file's content, stored in checkpoints
  int64_t start_step_ = 0;
  std::string checkpoint_path_;
  std::optional<int64_t> last_checkpoint_step_;
};

void TrainLoop::checkProfileOptions() const {
  try {
    quantFormatBits(fmt::format("int8:{}:rtn", o_.profile_granularity));
  } catch (const Error&) {
    throw Error(fmt::format("--profile-granularity: expected tensor, channel or block<N>, got '{}'",
                            o_.profile_granularity));
  }
  if (o_.profile_steps == 0) {
    // The flags that say what a profile records mean nothing without one.
    const char* orphan = !o_.profile_formats.empty() ? "--profile-formats"
                         : o_.profile_metrics        ? "--profile-metrics"
                         : o_.profile_outputs        ? "--profile-outputs"
                                                     : nullptr;
    if (orphan) throw Error(fmt::format("{} says what a profile records: give --profile-steps N and --profile-out FILE "
                                        "too",
                                        orphan));
  }
  if (o_.profile_steps == 0 && o_.profile_out.empty()) return;
  if (o_.profile_out.empty()) throw Error("--profile-steps needs --profile-out FILE");
  if (o_.profile_steps == 0)
    throw Error(fmt::format("--profile-steps must be >= 1 to write {}, got 0", o_.profile_out));
  // Fail now, not after training, when the profile or the CSV beside it cannot be written.
  checkFileWithSidecar("--profile-out", o_.profile_out, profileCsvPath(o_.profile_out));
}

void TrainLoop::loadFrom(const std::string& path, bool same_run) {
  // Rank 0 reads and checks the checkpoint, and sends its whole tensors to the others,
  // which may run on machines without the file; each keeps its part.
  std::vector<std::pair<std::string, Tensor>> ordered;
  if (lead_) ordered = readCheckpoint(path, same_run);
  if (worldSize() > 1) {
    o_.collectives->broadcast(&start_step_, sizeof start_step_, 0);
    if (!lead_)
      for (const auto& [name, type] : session_->stateTypes()) ordered.emplace_back(name, Tensor(type));
    for (auto& [name, tensor] : ordered) o_.collectives->broadcast(tensor.raw(), static_cast<int64_t>(tensor.bytes()), 0);
  }
  session_->loadState(std::move(ordered), path);
  finishLoadChecks(path, same_run);
}

std::vector<std::pair<std::string, Tensor>> TrainLoop::readCheckpoint(const std::string& path, bool same_run) {
  Checkpoint ckpt = loadCheckpoint(path);
  std::optional<int64_t> planned = checkRunFields(ckpt, o_, path, same_run);
  // A new run from a checkpoint (--init-from) may use another batch size and seed
  // (fine-tuning at a larger batch, a second seed of a fine-tuning run): neither changes
  // a parameter. A resumed run changes nothing.
  checkCheckpointModel(ckpt.model_config, o_.model, path, same_run);
  const Corpus& corpus = session_->corpus();
  auto fingerprint = ckpt.info.find("corpus_fingerprint");
  if (fingerprint != ckpt.info.end() && fingerprint->second != fmt::format("{:016x}", corpus.fingerprint))
    throw Error(fmt::format("{}: the checkpoint was trained on another corpus ({}); use the same --corpus", path,
                            ckpt.info["corpus"]));
  auto tokenizer = ckpt.info.find("tokenizer_hash");
  if (tokenizer != ckpt.info.end() &&
      tokenizer->second != fmt::format("{:016x}", session_->corpusTokens().tokenizerHash()))
    throw Error(fmt::format("{}: the checkpoint was trained with another SentencePiece model of this corpus (the "
                            "tokenizer cache was rebuilt differently); its token ids mean other pieces",
                            path));
  auto precision = ckpt.info.find("precision");
  if (same_run && precision != ckpt.info.end() && precision->second != precisionName(o_.precision))
    throw Error(fmt::format("{}: the checkpoint was trained in {} precision, not {}", path, precision->second,
                            precisionName(o_.precision)));
  if (same_run && ckpt.recipe != recipe_text_)
    throw Error(fmt::format("{}: the run was trained with {}; resume it with the same recipe (or start a new run "
                            "from it with --init-from)",
                            path, ckpt.recipe.empty() ? std::string("no recipe") : "another recipe"));
  checkCheckpointMatches(ckpt, session_->stateTypes(), path);
  // Put the tensors in the session's order.
  std::vector<std::pair<std::string, Tensor>> ordered;
  for (const auto& [name, type] : session_->stateTypes())
    for (auto& entry : ckpt.tensors)
      if (entry.first == name) ordered.emplace_back(name, std::move(entry.second));
  start_step_ = ckpt.step;
  if (ckpt.threads != omp_get_max_threads())
    spdlog::warn("continuing with {} threads; the checkpoint was written with {}: results can differ in the last "
                 "bits from an uninterrupted run",
                 omp_get_max_threads(), ckpt.threads);
  if (planned && *planned != o_.steps)
    spdlog::warn("the run was planned for {} steps, now --steps {}: the learning-rate schedule changes from here on",
                 *planned, o_.steps);
  return ordered;
}

void TrainLoop::finishLoadChecks(const std::string& path, bool same_run) {
  if (start_step_ >= o_.steps)
    throw Error(fmt::format("{}: the checkpoint is already at step {}; ask for more --steps than that", path,
                            start_step_));
  if (o_.profile_steps > 0 && o_.profile_warmup < start_step_)
    throw Error(fmt::format("--profile-warmup {} starts before the checkpoint's step {}; profile steps must come "
                            "after it",
                            o_.profile_warmup, start_step_));
  if (same_run) spdlog::info("resuming from {} at step {}", path, start_step_);
  else spdlog::debug("starting from {} at step {}", path, start_step_);
}

void TrainLoop::resume() {
  loadFrom(checkpoint_path_, true);
  last_checkpoint_step_ = start_step_;
}

void TrainLoop::saveCheckpointAt(int64_t step) {
  Checkpoint ckpt;
  ckpt.step = step;
  ckpt.seed = o_.model.seed;
  ckpt.threads = omp_get_max_threads();
  ckpt.model_config = o_.model.toYaml();
  ckpt.info["corpus"] = session_->corpus().source;
  ckpt.info["corpus_fingerprint"] = fmt::format("{:016x}", session_->corpus().fingerprint);
  if (o_.model.tokenizer == TokenizerKind::kSentencePiece)
    ckpt.info["tokenizer_hash"] = fmt::format("{:016x}", session_->corpusTokens().tokenizerHash());
  ckpt.info["precision"] = precisionName(o_.precision);
  ckpt.info["planned_steps"] = std::to_string(o_.steps);
  ckpt.recipe = recipe_text_;
  ckpt.tensors = session_->state();  // every rank: split tensors are gathered
  if (lead_) saveCheckpoint(checkpoint_path_, ckpt);
  last_checkpoint_step_ = step;
}

// Every rank of a job must train the same thing: the same pgq, model config and recipe
// (the files may differ between machines). Each compares its fingerprint with rank 0's
// before any work; all ranks refuse together, with the same message.
void TrainLoop::checkRanksAgree() const {
  auto hash = [](const std::string& text) {
    return fnv1a64(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  };
  const std::vector<std::string> fields{PGQ_VERSION_STRING, fmt::format("{:016x}", hash(o_.model.toYaml())),
                                        fmt::format("{:016x}", hash(recipe_text_)),
                                        fmt::format("{} {} {}", o_.steps, o_.optimizer.lr, precisionName(o_.precision))};
  const std::vector<std::string> names{"pgq version", "model config", "recipe", "--steps/--lr/--precision"};
  std::vector<std::string> all = o_.collectives->allGatherStrings(fmt::format("{}", fmt::join(fields, "\n")));
  auto split = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) out.push_back(line);
    out.resize(4);
    return out;
  };
  const std::vector<std::string> first = split(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const std::vector<std::string> theirs = split(all[r]);
    std::vector<std::string> differ;
    for (size_t i = 0; i < names.size(); ++i)
      if (theirs[i] != first[i]) differ.push_back(names[i]);
    throw Error(fmt::format("rank {} was started with a different {} than rank 0 (compared by hash); every rank "
                            "of a job needs the same pgq build, model config and recipe",
                            r, differ.empty() ? std::string("setup") : fmt::format("{}", fmt::join(differ, ", "))));
  }
}

TrainResult TrainLoop::run() {
  const auto started = std::chrono::steady_clock::now();
  validateTrainOptions(o_);
  if (lead_) checkProfileOptions();
  checkEstimatedMemory(o_);
  if (!o_.recipe_path.empty()) recipe_text_ = readTextFile(o_.recipe_path, InputKind::kRecipe);
  if (worldSize() > 1) checkRanksAgree();
  checkpoint_path_ = (std::filesystem::path(o_.out_dir) / kCheckpointFile).string();
  // Held until training returns: the checks below and every file the run writes assume
  // that no other process uses the directory. Only rank 0 touches it.
  std::optional<RunDirLock> lock;
  if (lead_) {
    std::error_code ec;
    std::filesystem::create_directories(o_.out_dir, ec);
    if (ec) throw Error(fmt::format("{}: cannot create the output directory: {}", o_.out_dir, ec.message()));
    lock.emplace(o_.out_dir);
    bool have_checkpoint = std::filesystem::exists(checkpoint_path_);
    if (o_.resume && !have_checkpoint) throw Error(fmt::format("--resume: no checkpoint at {}", checkpoint_path_));
    if (!o_.resume && have_checkpoint)
      throw Error(fmt::format("{} already exists: pass --resume to continue that run, or choose another "
                              "--out directory",
                              checkpoint_path_));
  }
  if (o_.resume && !o_.init_from.empty())
    throw Error("--resume continues this run, --init-from starts a new one from another run: give one of them");
  session_ = std::make_unique<TrainingSession>(o_);
  if (o_.resume) resume();
  else if (!o_.init_from.empty()) loadFrom(o_.init_from, false);

  TrainResult result;
  result.setup_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  result.checkpoint_path = checkpoint_path_;
  result.metrics_path = (std::filesystem::path(o_.out_dir) / kMetricsFile).string();
  std::string recipe_name = o_.recipe_path.empty() ? precisionName(o_.precision) : session_->recipeName();
  std::optional<MetricsWriter> metrics;
  if (lead_)
    metrics.emplace(result.metrics_path,
                    std::vector<std::string>{"step", "loss", "val_loss", "val_bpb", "lr", "grad_norm", "step_ms",
                                             "tokens_per_s", "recipe"},
                        o_.resume ? std::optional<int64_t>(start_step_) : std::nullopt);
  // A run started from another run's checkpoint has no rows before its first step.
  std::optional<ProgressBar> bar;
  if (o_.progress && lead_) bar.emplace(o_.steps, start_step_, o_.log_every);
  const double tokens = static_cast<double>(o_.model.tokens());
  const int64_t end_step = o_.stop_after > 0 ? std::min(o_.steps, start_step_ + o_.stop_after) : o_.steps;
  // Plain steps before the profile window (after the first, which includes setup) give
  // the step time the recipe's speedup estimate starts from.
  double plain_ms = 0;
  int plain_steps = 0;

  std::optional<CollectiveStats> collectives_before;
  for (int64_t step = start_step_; step < end_step; ++step) {
    StepRecord record;
    if (step == start_step_ + 1 && o_.collectives) collectives_before = o_.collectives->stats();
    try {
      record = session_->step(step, profiling(step));
    } catch (const Error& e) {
      if (bar) bar->finish();
      std::string kept = last_checkpoint_step_
                             ? fmt::format("the last good checkpoint ({}, step {}) is kept", checkpoint_path_,
                                           *last_checkpoint_step_)
                             : std::string("no checkpoint had been written yet");
      throw Error(fmt::format("{}; stopped, {}. Try a lower --lr.", e.what(), kept));
    }
    bool last = step + 1 == end_step;
    if (last || (o_.eval_every > 0 && (step + 1) % o_.eval_every == 0)) {
      Evaluation eval = session_->evaluate();
      record.val_loss = eval.loss;
      record.val_bpb = eval.bits_per_byte;
    }
    double tokens_per_s = tokens / (record.step_ms / 1000.0);
    if (metrics) metrics->write({{"step", record.step},
                   {"loss", record.loss},
                   {"val_loss", record.val_loss ? MetricsWriter::Cell(*record.val_loss) : MetricsWriter::Cell()},
                   {"val_bpb", record.val_bpb ? MetricsWriter::Cell(*record.val_bpb) : MetricsWriter::Cell()},
                   {"lr", record.lr},
                   {"grad_norm", record.grad_norm},
                   {"step_ms", record.step_ms},
                   {"tokens_per_s", tokens_per_s},
                   {"recipe", recipe_name}});
    if (last || (o_.checkpoint_every > 0 && (step + 1) % o_.checkpoint_every == 0)) saveCheckpointAt(step + 1);
    if (!profiling(step) && step > start_step_ && o_.profile_steps > 0 && step < o_.profile_warmup) {
      plain_ms += record.step_ms;
      ++plain_steps;
    }
    if (profiling(step) && !profiling(step + 1)) {
      auto start = std::chrono::steady_clock::now();
      Profile profile = session_->profile(plain_steps > 0 ? plain_ms / plain_steps : 0.0);  // every rank's
      if (lead_) writeProfile(o_.profile_out, profile);
      result.profile_write_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      result.profile_path = o_.profile_out;
      spdlog::debug("wrote profile {} in {:.0f} ms", o_.profile_out, result.profile_write_ms);
    }
    if (bar) bar->update({step + 1, record.loss, record.val_loss, record.val_bpb, tokens_per_s, record.step_ms});
    result.history.push_back(record);
    if (record.val_loss) result.final_val_loss = record.val_loss;
    if (record.val_bpb) result.final_val_bpb = record.val_bpb;
  }
  if (bar) bar->finish();
  if (collectives_before && end_step - start_step_ > 1) {
    // Evaluation and checkpoints communicate too; their share is included.
    const CollectiveStats& now = o_.collectives->stats();
    const double steps = static_cast<double>(end_step - start_step_ - 1);
    result.collective_bytes_per_step = (now.bytes - collectives_before->bytes) / steps;
    result.collective_ms_per_step = (now.ms - collectives_before->ms) / steps;
    result.collective_calls_per_step = static_cast<double>(now.calls - collectives_before->calls) / steps;
  }
  result.memory = session_->executor().memory();
  result.op_profile = opTimings(session_->executor());
  if (const Executor* instrumented = session_->instrumentedExecutorIfBuilt())
    result.profiled_op_profile = opTimings(*instrumented);
  return result;
}

}  // namespace

TrainResult train(const TrainOptions& options) { return TrainLoop(options).run(); }

}  // namespace pgq
