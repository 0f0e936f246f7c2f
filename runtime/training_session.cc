#include "runtime/training_session.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numbers>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/cpu_isa.h"
#include "kernels/optim.h"
#include "passes/compile.h"
#include "plan/hardware.h"
#include "plan/policy.h"
#include "plan/recipe.h"
#include "runtime/data_loader.h"
#include "runtime/memory_estimate.h"
#include "runtime/mpi.h"
#include "runtime/param_init.h"
#include "runtime/profile_collector.h"
#include "runtime/sharding.h"
#include "support/errors.h"
#include "support/quant_format.h"
#include "pgq_version.h"

namespace pgq {

namespace {

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

}  // namespace

ProfileRequest profileRequest(const TrainOptions& o) { return profileRequest(o.profile, thisCpu()); }

TrainingPipelineOptions trainingPipelineOptions(const TrainOptions& o, bool instrument, const Recipe* recipe,
                                                const HardwareModel* hardware) {
  TrainingPipelineOptions p;
  p.precision = o.precision;
  if (instrument) p.profile = profileRequest(o);
  if (hardware) p.hardware = *hardware;
  if (recipe) p.recipe = *recipe;
  p.seed = o.model.seed;
  return p;
}

namespace {

// The pipeline of one of the session's graphs: trainingPipelineOptions() of this
// process's options, averaged over the data-parallel replicas when there are several.
TrainingPipelineOptions graphPipeline(const TrainOptions& local, bool instrument, const Recipe* recipe,
                                      const HardwareModel* hardware, bool data_parallel, int64_t replica = 0) {
  TrainingPipelineOptions p = trainingPipelineOptions(local, instrument, recipe, hardware);
  p.data_parallel = data_parallel;
  p.replica = replica;
  return p;
}

const TrainOptions& checkedForSession(const TrainOptions& o) {
  checkSessionOptions(o);
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

  const TrainOptions o;  // checked (checkSessionOptions) before anything else is built
  Job job;
  // lr x the AdamW step bound of the last update: how far it moved any weight element
  // (predicted weight scales add it; 0 before the first update).
  double weight_step = 0;
  // The executor whose parameter quantizations the last optimizer update made from the
  // parameters it wrote (Executor::parameterQuantizations): its next run skips them.
  // Anything else that writes the parameters (loadState) resets it.
  const Executor* quantized_for = nullptr;
  TrainOptions lo;  // o with this process's share of the batch
  Corpus corpus;
  CorpusTokens corpus_tokens;
  std::optional<Recipe> recipe;
  std::optional<HardwareModel> hardware;
  TransformerGraph train;
  TransformerGraph eval;
  std::unique_ptr<Executor> train_exec;
  std::unique_ptr<Executor> eval_exec;
  // Stage (i): the same training graph with statistics nodes, built on first use, and
  // what its steps collected.
  struct Profiling {
    TransformerGraph graph;
    std::unique_ptr<Executor> exec;
    std::unique_ptr<ProfileCollector> collector;
    // Wall time of the profiled steps after the first (whose kernels run for the first
    // time), and of the first.
    double ms = 0, first_ms = 0;
    int64_t steps = 0;
  } profiling;
  // What training changes: this device's part of each parameter with its AdamW moments.
  struct Parameters {
    std::vector<Tensor> values, m, v;
    // Each parameter's split over the tensor-parallel devices (none: whole on each).
    std::vector<std::optional<ParamSplit>> splits;
    // An imported model's constants (frozen parameters and buffers), by name.
    std::vector<std::pair<std::string, Tensor>> constants;
  } state;
  Tensor tokens, targets;
  BatchSampler sampler;
  // What the memory check of each executor's plan compares: the memory available when
  // the session started, and the bytes planned so far (parameters, moments, the batch
  // and the buffers of the executors compiled before).
  struct MemoryBudget {
    std::optional<double> available = availableMemoryBytes();
    double planned = 0;
  } memory;

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
    : o(checkedForSession(options)),
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
    train = compileModel(lo.model, {.pipeline = graphPipeline(lo, false, recipe ? &*recipe : nullptr,
                                                              hardware ? &*hardware : nullptr, data_parallel,
                                                              job.replica),
                                    .initial_values = true});
  } catch (const Error& e) {
    if (!data_parallel || !o.model.imported()) throw;
    throw Error(fmt::format("{}\n(each of the {} data-parallel replicas imports the model for its {} of the {} rows "
                            "of the global batch; export it with a dynamic batch axis, e.g. scripts/export_onnx.py "
                            "--dynamic-batch)",
                            e.what(), job.replicas, lo.model.batch, o.model.batch));
  }
  // The forward graph and its loss, bound to the training parameters.
  eval = compileModel(lo.model,
                      {.backward = false, .pipeline = graphPipeline(lo, false, nullptr, nullptr, data_parallel)});
  // The parameters, their AdamW moments and the batch, allocated after the executors.
  auto bytes = [](const Node* n) {
    return static_cast<double>(n->shape().numElements()) * static_cast<double>(dtypeSize(n->dtype()));
  };
  for (const Node* p : train.params) memory.planned += 3 * bytes(p);
  memory.planned += 2 * bytes(train.tokens);
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
    state.splits.push_back(paramSplit(*p));
    Tensor whole(globalType(*p));
    if (state.splits.back()) {
      // initParameter checks the tensor against the node's type: give it the global one.
      Graph scratch;
      Node* global = scratch.create(Op::kParameter, {}, p->attrs(), globalType(*p), p->name());
      initParameter(*global, o.model.seed, whole, train.values.get());
    } else {
      initParameter(*p, o.model.seed, whole, train.values.get());
    }
    if (job.comm->worldSize() > 1) job.comm->broadcast(whole.raw(), static_cast<int64_t>(whole.bytes()), 0);
    const std::optional<ParamSplit>& split = state.splits.back();
    state.values.push_back(split ? shardOf(whole, split->dim, job.comm->rank(DeviceGroup::kTensor), split->devices)
                                 : std::move(whole));
    state.m.emplace_back(p->type());
    state.v.emplace_back(p->type());
  }
  // Frozen weights and buffers too (an imported model's external data may differ between
  // machines). Under tensor parallelism a constant may be this rank's part, which only
  // its data-parallel replicas share: it comes from the first replica's rank of the same
  // tensor-parallel index (at tensor_parallel 1, from rank 0).
  const bool broadcast = job.comm->size(DeviceGroup::kData) > 1;
  for (Node* c : train.constants) {
    state.constants.emplace_back(c->name(), Tensor(c->type()));
    Tensor& value = state.constants.back().second;
    initParameter(*c, o.model.seed, value, train.values.get());
    if (broadcast) job.comm->broadcast(value.raw(), static_cast<int64_t>(value.bytes()), DeviceGroup::kData);
  }
  train.values.reset();  // an imported model's weights: the parameters hold them now
}

ExecutorOptions TrainingSession::Impl::executorOptions(bool profile) {
  ExecutorOptions options;
  options.profile = profile;
  options.parameter_quantizations = true;
  options.before_allocation = [this](const MemoryStats& planned) {
    memory.planned += static_cast<double>(planned.arena_bytes + planned.persistent_bytes);
    checkPlannedMemory(o.model, memory.planned, memory.available);
  };
  return options;
}

void TrainingSession::Impl::bindParams() {
  for (size_t i = 0; i < train.params.size(); ++i) {
    train_exec->bind(train.params[i], state.values[i]);
    eval_exec->bind(train.params[i]->name(), state.values[i]);
    if (profiling.exec) profiling.exec->bind(train.params[i]->name(), state.values[i]);
  }
  for (auto& [name, tensor] : state.constants) {
    train_exec->bind(name, tensor);
    eval_exec->bind(name, tensor);
    if (profiling.exec) profiling.exec->bind(name, tensor);
  }
}

void TrainingSession::Impl::buildInstrumented() {
  // Its parameters are bound to the training graph's tensors.
  profiling.graph = compileModel(lo.model, {.pipeline = graphPipeline(lo, true, nullptr, nullptr, job.replicas > 1)});
  profiling.exec = makeExecutor(*profiling.graph.graph, o.profile_ops);
  profiling.exec->bind(profiling.graph.tokens, tokens);
  if (profiling.graph.targets) profiling.exec->bind(profiling.graph.targets, targets);
  profiling.collector = std::make_unique<ProfileCollector>(*profiling.graph.graph, o.profile_amax_history);
  bindParams();
}

// The gradients are already averaged over the replicas; a split parameter's squares
// are summed over the tensor-parallel devices, a whole one's counted once.
double TrainingSession::Impl::gradNorm(const Executor& exec) const {
  double split_sum = 0, whole_sum = 0;
  for (size_t i = 0; i < state.values.size(); ++i) {
    // An int8 weight gradient's squares were summed as its GEMM wrote it.
    std::span<const float> g = exec.output<float>(i + 1);
    const std::optional<double> summed = exec.outputSumOfSquares(i + 1);
    const double squares = summed ? *summed : kernels::sumSquares(g.data(), static_cast<int64_t>(g.size()));
    (state.splits[i] ? split_sum : whole_sum) += squares;
    if (spdlog::should_log(spdlog::level::trace))
      spdlog::trace("gradient of {}: sum of squares {} ({})", train.params[i]->name(), squares,
                 state.splits[i] ? "this device's part" : "whole");
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
double TrainingSession::plannedBytes() const { return impl_->memory.planned; }

Executor& TrainingSession::instrumentedExecutor() {
  if (!impl_->profiling.exec) impl_->buildInstrumented();
  return *impl_->profiling.exec;
}

const Executor* TrainingSession::instrumentedExecutorIfBuilt() const { return impl_->profiling.exec.get(); }

Profile TrainingSession::profile(double plain_step_ms, bool this_process_only) const {
  const Impl& s = *impl_;
  PGQ_ASSERT(s.profiling.collector && s.profiling.collector->steps() > 0, "no profiled steps");
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
  const ProfileRequest request = profileRequest(s.o);
  for (const QuantFormat& f : request.formats) run.formats.push_back(f.toString());
  for (const QuantFormat& f : request.gradient_formats) run.gradient_formats.push_back(f.toString());
  run.step_ms = plain_step_ms;
  run.metrics = s.o.profile.metrics;
  run.metrics_step_ms = s.profiling.steps > 1 ? s.profiling.ms / static_cast<double>(s.profiling.steps - 1)
                                             : s.profiling.first_ms;
  return s.profiling.collector->profile(std::move(run), this_process_only ? nullptr : s.job.comm);
}

StepRecord TrainingSession::step(int64_t step, bool profile) {
  Impl& s = *impl_;
  Executor& exec = profile ? instrumentedExecutor() : *s.train_exec;
  auto start = std::chrono::steady_clock::now();
  s.sampler.sample(step, s.tokens, s.targets);
  exec.run(step, s.weight_step, s.quantized_for == &exec);
  s.quantized_for = nullptr;
  double loss = exec.outputScalar(0);
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); };
  const Clock::time_point norm_start = Clock::now();
  double norm = s.gradNorm(exec);
  const double norm_ms = since(norm_start);
  if (!std::isfinite(loss) || !std::isfinite(norm))
    throw Error(fmt::format("step {}: the training {} is {}", step + 1,
                            std::isfinite(loss) ? "gradient norm" : "loss", std::isfinite(loss) ? norm : loss));
  const OptimizerConfig& opt = s.o.optimizer;
  double lr = learningRate(opt, step, s.o.steps);
  float scale = 1.0f;
  if (opt.grad_clip > 0 && norm > opt.grad_clip) scale = static_cast<float>(opt.grad_clip / norm);
  const Clock::time_point update_start = Clock::now();
  int64_t weight_copies = 0;
  for (size_t i = 0; i < s.state.values.size(); ++i) {
    kernels::AdamWParams p;
    p.lr = static_cast<float>(lr);
    p.beta1 = static_cast<float>(opt.beta1);
    p.beta2 = static_cast<float>(opt.beta2);
    p.eps = static_cast<float>(opt.eps);
    // Decay matrices only (GPT-2 practice): not norm gains.
    p.weight_decay = s.state.values[i].shape().rank() >= 2 ? static_cast<float>(opt.weight_decay) : 0.0f;
    p.step = step + 1;
    std::span<const float> g = exec.output<float>(i + 1);
    // The next run's int8 copies of the weight are made while the update writes it.
    const std::vector<kernels::ParamQuantization> quantizations =
        exec.parameterQuantizations(s.train.params[i]->name());
    weight_copies += static_cast<int64_t>(quantizations.size());
    kernels::adamwUpdateQuantized(s.state.values[i].data<float>(), g.data(), s.state.m[i].data<float>(),
                                  s.state.v[i].data<float>(), s.state.values[i].numElements(), p, scale,
                                  quantizations);
  }
  s.quantized_for = &exec;
  const double update_ms = since(update_start);
  double ms = since(start);
  // The update just applied moved each weight element by at most about lr (exactly: lr
  // x adamUpdateBound): what the profile's predicted weight scales add to this step's
  // absmax to predict the next one's.
  s.weight_step = lr * adamUpdateBound(opt.beta1, opt.beta2, step + 1);
  if (profile) {
    s.profiling.collector->add(exec, WeightStepBound{lr, adamUpdateBound(opt.beta1, opt.beta2, step + 1)});
    if (s.profiling.steps++ == 0) s.profiling.first_ms = ms;
    else s.profiling.ms += ms;
  }
  StepRecord record;
  record.step = step + 1;
  record.loss = loss;
  record.lr = lr;
  record.grad_norm = norm;
  record.step_ms = ms;
  record.norm_ms = norm_ms;
  record.update_ms = update_ms;
  record.weight_copies = weight_copies;
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

namespace {

constexpr std::string_view kKernelStatePrefix = "kernel_state/";

// The executors whose kernels' states a checkpoint keeps, by the name it keeps them under.
std::vector<std::pair<std::string_view, Executor*>> statefulExecutors(Executor* train, Executor* eval) {
  return {{"train", train}, {"eval", eval}};
}

}  // namespace

std::vector<std::pair<std::string, TensorType>> TrainingSession::kernelStateTypes() const {
  const Impl& s = *impl_;
  const int64_t ranks = s.job.comm->worldSize();
  std::vector<std::pair<std::string, TensorType>> types;
  for (const auto& [exec_name, exec] : statefulExecutors(s.train_exec.get(), s.eval_exec.get()))
    for (const auto& [node, bytes] : exec->kernelStates())
      types.emplace_back(fmt::format("{}{}/{}", kKernelStatePrefix, exec_name, node),
                         TensorType{DType::kU8, Shape({ranks, static_cast<int64_t>(bytes.size())})});
  return types;
}

std::vector<std::pair<std::string, Tensor>> TrainingSession::kernelStates() const {
  const Impl& s = *impl_;
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [exec_name, exec] : statefulExecutors(s.train_exec.get(), s.eval_exec.get()))
    for (const auto& [node, bytes] : exec->kernelStates()) {
      const std::vector<std::string> ranks = s.job.comm->allGatherStrings(bytes);
      Tensor t(TensorType{DType::kU8, Shape({static_cast<int64_t>(ranks.size()), static_cast<int64_t>(bytes.size())})});
      for (size_t r = 0; r < ranks.size(); ++r) {
        PGQ_ASSERT(ranks[r].size() == bytes.size(), "kernel state of %{}: {} bytes on rank {}, {} here", node,
                   ranks[r].size(), r, bytes.size());
        std::memcpy(t.data<uint8_t>() + r * bytes.size(), ranks[r].data(), bytes.size());
      }
      out.emplace_back(fmt::format("{}{}/{}", kKernelStatePrefix, exec_name, node), std::move(t));
    }
  return out;
}

void TrainingSession::loadKernelStates(const std::vector<std::pair<std::string, Tensor>>& tensors, int64_t steps,
                                       const std::string& source) {
  Impl& s = *impl_;
  const size_t rank = static_cast<size_t>(s.job.comm->worldRank());
  for (const auto& [exec_name, exec] : statefulExecutors(s.train_exec.get(), s.eval_exec.get())) {
    const std::string prefix = fmt::format("{}{}/", kKernelStatePrefix, exec_name);
    std::vector<std::pair<std::string, std::string>> states;
    for (const auto& [name, t] : tensors) {
      if (!name.starts_with(prefix)) continue;
      const size_t bytes = static_cast<size_t>(t.shape().dims().back());
      const char* row = reinterpret_cast<const char*>(t.data<uint8_t>()) + rank * bytes;
      states.emplace_back(name.substr(prefix.size()), std::string(row, bytes));
    }
    exec->loadKernelStates(states, source);
  }
  // As step() sets it after step `steps` (its index steps - 1).
  const OptimizerConfig& opt = s.o.optimizer;
  s.weight_step = steps > 0 ? learningRate(opt, steps - 1, s.o.steps) * adamUpdateBound(opt.beta1, opt.beta2, steps)
                            : 0.0;
}

std::vector<std::pair<std::string, Tensor>> TrainingSession::state() const {
  const Impl& s = *impl_;
  std::vector<std::pair<std::string, Tensor>> out;
  // The whole tensors: a split one is gathered from the tensor-parallel devices.
  auto whole = [&](size_t i, const Tensor& t) {
    return s.state.splits[i] ? gatherShards(t, s.state.splits[i]->dim, *s.job.comm) : t.clone();
  };
  for (size_t i = 0; i < s.state.values.size(); ++i) {
    const std::string& name = s.train.params[i]->name();
    out.emplace_back(name, whole(i, s.state.values[i]));
    out.emplace_back("adam_m/" + name, whole(i, s.state.m[i]));
    out.emplace_back("adam_v/" + name, whole(i, s.state.v[i]));
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
    return s.state.splits[i] ? shardOf(t, s.state.splits[i]->dim, rank, s.state.splits[i]->devices) : std::move(t);
  };
  for (size_t i = 0; i < s.state.values.size(); ++i) {
    s.state.values[i] = part(i, tensors[3 * i].second);
    s.state.m[i] = part(i, tensors[3 * i + 1].second);
    s.state.v[i] = part(i, tensors[3 * i + 2].second);
  }
  s.quantized_for = nullptr;
  s.bindParams();
}

}  // namespace pgq
