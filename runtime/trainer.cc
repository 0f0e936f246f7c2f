#include "runtime/trainer.h"

#include <omp.h>

#include <charconv>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "ir/dot_dims.h"
#include "runtime/checkpoint.h"
#include "runtime/metrics.h"
#include "runtime/progress.h"
#include "runtime/run_dir_lock.h"
#include "runtime/run_layout.h"
#include "support/errors.h"
#include "support/file_io.h"
#include "support/hash.h"
#include "pgq_version.h"

namespace pgq {

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

// Kernel time per node of an executor's timed runs (TrainOptions::profile_ops).
std::vector<OpTiming> opTimings(const Executor& exec) {
  std::vector<OpTiming> timings;
  auto bytesOf = [](const Node* n) {
    return static_cast<double>(n->shape().numElements()) * static_cast<double>(dtypeSize(n->dtype()));
  };
  for (const NodeProfile& p : exec.profile()) {
    double flops = 0;
    std::string dtype;
    if (p.node->op() == Op::kMatMul || p.node->op() == Op::kQMatMul) {
      flops = gemmSizes(p.node->operand(0)->shape(), p.node->operand(1)->shape(),
                        DotDims::fromAttrs(p.node->attrs())).flops();
      dtype = p.node->op() == Op::kQMatMul ? "int8" : std::string(dtypeName(p.node->operand(0)->dtype()));
    }
    double bytes = bytesOf(p.node);
    for (const Node* operand : p.node->operands()) bytes += bytesOf(operand);
    // (Elementwise maps write over an operand too; only a two-operand add can be this one.)
    const Node* scatter = p.in_place_operand >= 0 && p.node->op() == Op::kAdd && p.node->numOperands() == 2
                              ? p.node->operand(1 - p.in_place_operand)
                              : nullptr;
    if (scatter && scatter->op() == Op::kScatterAdd) {
      // An add of scattered rows written over its other operand (CpuBackend's in-place
      // scatter add) reads the updates and indices and reads and writes only the rows they
      // touch: as many as the updates have, at most.
      const double updates = bytesOf(scatter->operand(0));
      bytes = 3 * updates + bytesOf(scatter->operand(1));
    }
    std::string kind(opName(p.node->op()));
    if (!p.makes.empty()) kind += "+quantize";
    for (const Node* made : p.makes) bytes += bytesOf(made);
    timings.push_back({p.node->name(), p.node->op(), kind, p.node->attrs().getStringOr(AttrKey::kLabel, ""), flops,
                       dtype, bytes, p.total_ms, p.calls});
  }
  return timings;
}

// The bookkeeping around a session: run directory, resume, metrics, checkpoints,
// progress.
class TrainLoop {
 public:
  explicit TrainLoop(const TrainOptions& options) : o_(options) {}
  TrainResult run();

 private:
  // Loads a checkpoint's state after checking it fits this run; `same_run` also
  // requires the same recipe (a resume, as opposed to --init-from).
  void loadFrom(const std::string& path, bool same_run);
  bool profiling(int64_t step) const {
    return o_.profile_steps > 0 && step >= o_.profile_warmup && step < o_.profile_warmup + o_.profile_steps;
  }
  void resume();
  void saveCheckpointAt(int64_t step);
  void checkRanksAgree() const;
  void checkRanksReadTheSameData() const;
  // Rank 0's part of loadFrom: the checkpoint's whole tensors in the session's order.
  std::vector<std::pair<std::string, Tensor>> readCheckpoint(const std::string& path, bool same_run);
  void finishLoadChecks(const std::string& path, bool same_run);
  // Moves the kernels' states out of `ckpt` (rank 0), into kernel_states_ when the run
  // continues (`same_run`) and they fit this run's kernels; warns when such a run's
  // kernels keep a state the checkpoint cannot give them.
  void takeKernelStates(Checkpoint& ckpt, const std::string& path, bool same_run);
  // Why the checkpoint just read (start_step_ set) cannot start this run, or nothing:
  // finishLoadChecks throws it, and readCheckpoint gives no warnings before it.
  std::optional<std::string> checkpointRefusal(const std::string& path) const;
  int worldSize() const { return o_.collectives ? o_.collectives->worldSize() : 1; }

  const TrainOptions& o_;
  const RunLayout layout_{o_.out_dir};
  // Rank 0 (or the only process) checks and writes the run's files; the others compute.
  const bool lead_ = o_.collectives == nullptr || o_.collectives->worldRank() == 0;
  std::unique_ptr<TrainingSession> session_;
  std::string recipe_text_;  // the recipe file's content, stored in checkpoints
  int64_t start_step_ = 0;
  std::string checkpoint_path_;
  std::optional<int64_t> last_checkpoint_step_;
  // The checkpoint's kernel states in kernelStateTypes() order, while loadFrom runs.
  std::vector<std::pair<std::string, Tensor>> kernel_states_;
};

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
  // The kernels' states (amax histories, predicted scales) when rank 0 found them fit to
  // continue with, each rank's row from rank 0's file.
  int32_t load_states = lead_ && !kernel_states_.empty() ? 1 : 0;
  if (worldSize() > 1) {
    o_.collectives->broadcast(&load_states, sizeof load_states, 0);
    if (load_states && !lead_)
      for (const auto& [name, type] : session_->kernelStateTypes()) kernel_states_.emplace_back(name, Tensor(type));
    if (load_states)
      for (auto& [name, tensor] : kernel_states_)
        o_.collectives->broadcast(tensor.raw(), static_cast<int64_t>(tensor.bytes()), 0);
  }
  if (load_states) session_->loadKernelStates(kernel_states_, start_step_, path);
  kernel_states_.clear();
  finishLoadChecks(path, same_run);
}

// The optimizer's flags, as a checkpoint records them (AdamW's betas and eps are fixed).
std::string optimizerFlags(const OptimizerConfig& o) {
  return fmt::format("--lr {} --warmup {} --min-lr-ratio {} --weight-decay {} --grad-clip {}", o.lr, o.warmup,
                     o.min_lr_ratio, o.weight_decay, o.grad_clip);
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
  takeKernelStates(ckpt, path, same_run);
  checkCheckpointMatches(ckpt, session_->stateTypes(), path);
  // Put the tensors in the session's order.
  std::vector<std::pair<std::string, Tensor>> ordered;
  for (const auto& [name, type] : session_->stateTypes())
    for (auto& entry : ckpt.tensors)
      if (entry.first == name) ordered.emplace_back(name, std::move(entry.second));
  start_step_ = ckpt.step;
  // A checkpoint that finishLoadChecks refuses gets no warnings first: the refusal alone
  // says why the run does not start.
  if (checkpointRefusal(path)) return ordered;
  if (ckpt.threads != omp_get_max_threads())
    spdlog::warn("continuing with {} threads; the checkpoint was written with {}: results can differ in the last "
                 "bits from an uninterrupted run",
                 omp_get_max_threads(), ckpt.threads);
  if (planned && *planned != o_.steps)
    spdlog::warn("the run was planned for {} steps, now --steps {}: the learning-rate schedule changes from here on",
                 *planned, o_.steps);
  // Resuming with another --lr or --weight-decay may be meant (as with --steps), but not
  // in silence (it was).
  auto optimizer = ckpt.info.find("optimizer");
  if (same_run && optimizer != ckpt.info.end() && optimizer->second != optimizerFlags(o_.optimizer))
    spdlog::warn("the run was trained with {}, now {}: the optimizer changes from here on", optimizer->second,
                 optimizerFlags(o_.optimizer));
  return ordered;
}

void TrainLoop::takeKernelStates(Checkpoint& ckpt, const std::string& path, bool same_run) {
  std::vector<std::pair<std::string, Tensor>> found;
  std::erase_if(ckpt.tensors, [&](auto& entry) {
    if (!entry.first.starts_with("kernel_state/")) return false;
    found.push_back(std::move(entry));
    return true;
  });
  const std::vector<std::pair<std::string, TensorType>> expected = session_->kernelStateTypes();
  // A new run from the checkpoint (--init-from) may have another recipe and batch: its
  // scaling starts anew.
  if (!same_run || expected.empty()) return;
  auto find = [&](const std::string& name) {
    return std::find_if(found.begin(), found.end(), [&](const auto& entry) { return entry.first == name; });
  };
  const bool fit = found.size() == expected.size() && std::all_of(expected.begin(), expected.end(), [&](const auto& e) {
                     auto it = find(e.first);
                     return it != found.end() && it->second.type() == e.second;
                   });
  if (fit) {
    for (const auto& [name, type] : expected) kernel_states_.emplace_back(name, std::move(find(name)->second));
    return;
  }
  const TensorType& first = expected.front().second;
  auto written = std::find_if(found.begin(), found.end(), [](const auto& entry) { return entry.second.shape().rank() == 2; });
  const std::string why =
      found.empty() ? std::string("it keeps none: an earlier pgq wrote it")
      : written != found.end() && written->second.shape().dims()[0] != first.shape.dims()[0]
          ? fmt::format("it keeps those of {} processes, this run has {}", written->second.shape().dims()[0],
                        first.shape.dims()[0])
          : std::string("they are not those of this run's kernels");
  spdlog::warn("{}: the checkpoint cannot give this run's delayed or predicted scaling its amax histories ({}): they "
               "start anew, and the steps from here can differ from an uninterrupted run's",
               path, why);
}

std::optional<std::string> TrainLoop::checkpointRefusal(const std::string& path) const {
  if (start_step_ >= o_.steps)
    return fmt::format("{}: the checkpoint is already at step {}; ask for more --steps than that", path, start_step_);
  // An interrupted stage-(i) run resumed with its own command line lands here: the
  // statistics of its steps before the checkpoint were not kept, so say both ways on.
  if (o_.profile_steps > 0 && o_.profile_warmup < start_step_)
    return fmt::format("--profile-warmup {} starts before the checkpoint's step {}; profile steps must come after it "
                       "(a profile is not resumed: to finish the training, drop the --profile-* flags; to profile "
                       "from here, give --profile-warmup {} or more)",
                       o_.profile_warmup, start_step_, start_step_);
  return std::nullopt;
}

void TrainLoop::finishLoadChecks(const std::string& path, bool same_run) {
  if (std::optional<std::string> refusal = checkpointRefusal(path)) throw Error(*refusal);
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
  ckpt.info["optimizer"] = optimizerFlags(o_.optimizer);
  ckpt.recipe = recipe_text_;
  ckpt.tensors = session_->state();  // every rank: split tensors are gathered
  for (auto& entry : session_->kernelStates()) ckpt.tensors.push_back(std::move(entry));  // every rank's
  if (lead_) saveCheckpoint(checkpoint_path_, ckpt);
  last_checkpoint_step_ = step;
}

// Every rank of a job must train the same thing and call the same collectives in the
// same order: the same pgq, model config (an imported model's sharding rules by content)
// and recipe (the files may differ between machines), schedule, optimizer, evaluation,
// checkpoints, profile and data-parallel buckets. A rank started with another --warmup
// trained another model in silence; another --eval-every or --profile-steps called other
// collectives (MPI_ERR_TRUNCATE, or a hang until --collective-timeout). Each rank
// compares its fields with rank 0's before any work; all ranks refuse together, naming
// every field that differs.
void TrainLoop::checkRanksAgree() const {
  auto hash = [](const std::string& text) { return fmt::format("{:016x}", fnv1a64(text)); };
  std::string candidates;
  for (const ProfileCandidate& c : o_.profile.candidates)
    candidates += std::holds_alternative<Scheme>(c) ? fmt::format("{},", std::get<Scheme>(c))
                                                      : std::get<QuantFormat>(c).toString() + ",";
  const OptimizerConfig& opt = o_.optimizer;
  const char* bucket = std::getenv("PGQ_DP_BUCKET_MB");
  const std::vector<std::pair<std::string, std::string>> fields{
      {"pgq version", PGQ_VERSION_STRING},
      {"model config", hash(o_.model.toYaml())},
      {"sharding rules", o_.model.sharding_rules.empty()
                             ? std::string()
                             : hash(readTextFile(o_.model.sharding_rules, InputKind::kShardingRules))},
      {"recipe", hash(recipe_text_)},
      {"--steps/--stop-after", fmt::format("{} {}", o_.steps, o_.stop_after)},
      {"--precision", precisionName(o_.precision)},
      {"optimizer (--lr/--warmup/--weight-decay/--grad-clip/...)",
       fmt::format("{} {} {} {} {} {} {} {}", opt.lr, opt.min_lr_ratio, opt.warmup, opt.weight_decay, opt.beta1,
                   opt.beta2, opt.eps, opt.grad_clip)},
      {"--eval-every/--eval-batches", fmt::format("{} {}", o_.eval_every, o_.eval_batches)},
      {"--checkpoint-every/--resume/--init-from",
       fmt::format("{} {} {}", o_.checkpoint_every, o_.resume, o_.init_from.empty() ? "" : "init")},
      {"profile (--profile-*)",
       fmt::format("{} {} {} {} {} {} {} {} {}", o_.profile_steps, o_.profile_warmup, o_.profile_out.empty(),
                   o_.profile.bits, o_.profile.granularity.text(), candidates, o_.profile.outputs, o_.profile.metrics,
                   o_.profile_amax_history)},
      {"PGQ_DP_BUCKET_MB", bucket ? bucket : "(unset)"},
  };
  std::string mine;
  for (const auto& [name, value] : fields) mine += value + "\n";
  const std::vector<std::string> all = o_.collectives->allGatherStrings(mine);
  auto split = [&](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) out.push_back(line);
    out.resize(fields.size());
    return out;
  };
  const std::vector<std::string> first = split(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const std::vector<std::string> theirs = split(all[r]);
    std::vector<std::string> differ;
    for (size_t i = 0; i < fields.size(); ++i)
      if (theirs[i] != first[i]) differ.push_back(fields[i].first);
    throw Error(fmt::format("rank {} was started with a different {} than rank 0; every rank of a job needs the "
                            "same pgq build, model, recipe and training flags",
                            r, differ.empty() ? std::string("setup") : fmt::format("{}", fmt::join(differ, ", "))));
  }
}

// The corpus and tokenizer each rank read (by content: one path may hold other bytes on
// another machine): a rank that trained on another text averaged its gradients into the
// others' in silence. After the session is built (its collectives do not depend on the
// data), before the first step.
void TrainLoop::checkRanksReadTheSameData() const {
  const std::string mine = fmt::format(
      "{:016x} {:016x}", session_->corpus().fingerprint,
      o_.model.tokenizer == TokenizerKind::kSentencePiece ? session_->corpusTokens().tokenizerHash() : uint64_t{0});
  const std::vector<std::string> all = o_.collectives->allGatherStrings(mine);
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      throw Error(fmt::format("rank {} read another corpus or tokenizer than rank 0 (by content: corpus {}, "
                              "fingerprints {} there and {} on rank 0); every rank of a job needs the same bytes",
                              r, o_.corpus, all[r], all[0]));
}

TrainResult TrainLoop::run() {
  const auto started = std::chrono::steady_clock::now();
  validateTrainOptions(o_);
  if (lead_) checkProfileOptions(o_);
  checkEstimatedMemory(o_);
  if (!o_.recipe_path.empty()) recipe_text_ = readTextFile(o_.recipe_path, InputKind::kRecipe);
  if (worldSize() > 1) checkRanksAgree();
  checkpoint_path_ = layout_.checkpoint();
  // Held until training returns: the checks below and every file the run writes assume
  // that no other process uses the directory. Only rank 0 touches it.
  std::optional<RunDirLock> lock;
  if (lead_) {
    std::error_code ec;
    // A --resume into no folder at all is refused before the folder is made (it left an
    // empty run folder with a lock); into an existing one, after the lock, which names a
    // process that holds it.
    if (o_.resume && !std::filesystem::exists(o_.out_dir, ec))
      throw Error(fmt::format("--resume: no checkpoint at {}", checkpoint_path_));
    std::filesystem::create_directories(o_.out_dir, ec);
    if (ec) {
      // A symlink whose target is missing "exists" to mkdir (EEXIST) and not to stat.
      std::error_code link_ec;
      if (std::filesystem::is_symlink(std::filesystem::symlink_status(o_.out_dir, link_ec)))
        throw Error(fmt::format("{}: is a symlink to {}, which does not exist; create that folder or give another "
                                "--out",
                                o_.out_dir, std::filesystem::read_symlink(o_.out_dir, link_ec).string()));
      throw Error(fmt::format("{}: cannot create the output directory: {}", o_.out_dir, ec.message()));
    }
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
  if (worldSize() > 1) checkRanksReadTheSameData();
  if (o_.resume) resume();
  else if (!o_.init_from.empty()) loadFrom(o_.init_from, false);

  TrainResult result;
  result.setup_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  result.checkpoint_path = checkpoint_path_;
  result.metrics_path = layout_.metrics();
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
    if (!profiling(step)) {
      result.norm_ms_per_step += record.norm_ms;
      result.update_ms_per_step += record.update_ms;
      result.weight_copies_per_step = record.weight_copies;
      ++result.optimizer_steps;
    }
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
  if (result.optimizer_steps > 0) {
    result.norm_ms_per_step /= static_cast<double>(result.optimizer_steps);
    result.update_ms_per_step /= static_cast<double>(result.optimizer_steps);
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
