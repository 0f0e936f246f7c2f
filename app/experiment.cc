#include "app/experiment.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "app/experiment_report.h"
#include "app/orderings.h"
#include "app/plot.h"
#include "ir/quant.h"
#include "plan/hardware.h"
#include "plan/policy.h"
#include "plan/profile.h"
#include "plan/recipe_generator.h"
#include "runtime/checkpoint.h"
#include "runtime/memory_estimate.h"
#include "runtime/run_dir_lock.h"
#include "runtime/run_layout.h"
#include "support/config_file.h"
#include "runtime/corpus.h"
#include "support/errors.h"
#include "support/file_io.h"
#include "support/hash.h"
#include "support/option_ranges.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kF32 = "f32";
// Steps of the f32 run timed again at the end (at most the fine-tunes' own).
constexpr int64_t kRetimeSteps = 10;

std::string durationText(double seconds) {
  int64_t s = static_cast<int64_t>(std::max(0.0, seconds));
  return s >= 60 ? fmt::format("{}m{:02d}s", s / 60, s % 60) : fmt::format("{}s", s);
}

// The metric (the policy's; the profile's default metric otherwise) of every GEMM `p` quantizes,
// forward and backward, each lowest first: the thresholds between them are the ones
// that change a recipe.
struct CandidateSqnrs {
  std::vector<double> fwd, bwd;
};
CandidateSqnrs candidateSqnrs(const Profile& profile, const HardwareModel& hw, const Policy& p) {
  Recipe all = generateRecipe(profile, hw, p, "profile.yaml");
  CandidateSqnrs c;
  for (const RecipeEntry& e : all.entries) {
    if (e.decision != Decision::kQuantize) continue;
    const GemmProfile* g = profile.find(e.label);
    PGQ_ASSERT(g != nullptr, "recipe entry '{}' is not a GEMM of its profile", e.label);
    (g->direction == GemmDirection::kFwd ? c.fwd : c.bwd).push_back(e.metric_value);
  }
  std::sort(c.fwd.begin(), c.fwd.end());
  std::sort(c.bwd.begin(), c.bwd.end());
  return c;
}

// A recipe to fine-tune with. An adversarial one (a policy with an inverted
// threshold) quantizes the lowest-SQNR GEMMs on purpose: a check of the metric, never a
// candidate.
struct RecipeRun {
  std::string name, path;
  bool adversarial = false;
};

class Experiment {
 public:
  explicit Experiment(const ExperimentOptions& o) : o_(o), start_(Clock::now()) {}
  ExperimentResult run();

 private:
  void validate() const;
  void recordOptions() const;
  // Phase 1: the f32 baseline up to its checkpoint, with the profile of its last steps.
  void baseline();
  int64_t scheduleWarmup(int64_t steps) const;
  int64_t from_checkpoint_step_ = 0;  // the step of --from-checkpoint's checkpoint
  uint64_t corpus_fingerprint_ = 0;   // the corpus's bytes (runtime/corpus.h)
  // The profile of phase 1, checked to be of this experiment's model.
  Profile profile() const;
  // Phase 2: the recipes to compare.
  std::vector<RecipeRun> makeRecipes();
  // Phase 3: one fine-tuning run; `recipe` empty for the f32 continuation.
  RunSummary finetune(const std::string& name, const std::string& policy, const std::string& recipe, int64_t steps,
                      bool adversarial = false);
  // The same run in folder `dir` (finetune's: runs/<slug>).
  void checkFinishedRun(const std::string& dir, const RunSummary& s, const std::string& recipe_hash,
                        const std::string& start, int64_t last_step) const;
  RunSummary trainRun(const std::string& dir, const std::string& name, const std::string& policy,
                      const std::string& recipe, int64_t steps, bool adversarial);
  // The f32 step timed again after every fine-tune (timing/f32): a machine that got
  // busier or quieter during the experiment shows as a difference from the f32 run's
  // own time (app/experiment_report.h, timingCheck).
  RunSummary retimeBaseline();
  // Phases 2-3 of each protocol, and the report.
  ExperimentResult runRecipes();
  ExperimentResult runSearch();
  ExperimentResult runOrderings();
  void search(const Profile& profile, const HardwareModel& hw);
  // Fig. 2: the orderings' speed-vs-loss curves (app/orderings.h).
  std::string orderings(const Profile& profile, const HardwareModel& hw);
  // The policy quantizing every candidate of the ordering direction (the other in f32).
  Policy directionPolicy() const;

  TrainOptions trainOptions(const std::string& dir) const;
  // A policy by name or file, with the experiment's bits and granularity.
  Policy policy(const std::string& spec) const {
    Policy p = loadPolicy(spec);
    p.bits = o_.bits;
    p.granularity = o_.granularity;
    p.metric = o_.metric;
    p.formats = {o_.scheme};
    return p;
  }
  // "int8:channel" or "fp8"; with the gradients' rounding, for report titles.
  std::string settingName() const {
    return o_.scheme == Scheme::kInt8 ? fmt::format("int{}:{}", o_.bits, o_.granularity.text())
                                     : std::string(nameOf(o_.scheme));
  }
  // What the recipes quantize to, for table headings: "int8", "int4" or "fp8".
  std::string quantizedIn() const {
    return o_.scheme == Scheme::kInt8 ? fmt::format("int{}", o_.bits) : std::string(nameOf(o_.scheme));
  }
  // Prints the next phase's header; `steps` leave the ETA's count, trained or (done) not.
  void phase(const std::string& what, int64_t steps, bool done = false);
  // The ETA from the first fine-tuning run's steps: the profiled steps' estimate is the
  // instrumented graph's (several times slower with --profile-metrics).
  void noteStepTime(const RunSummary& s) {
    if (s.step_ms > 0 && !estimate_from_finetune_) {
      step_ms_estimate_ = s.step_ms;
      estimate_from_finetune_ = true;
    }
  }

  const ExperimentOptions& o_;
  Clock::time_point start_;
  std::string baseline_checkpoint_;
  int64_t baseline_step_ = 0;
  double step_ms_estimate_ = 0;
  bool estimate_from_finetune_ = false;
  int64_t steps_left_ = 0;
  int phase_ = 0, phases_ = 0;
};

void Experiment::validate() const {
  using namespace ranges;
  checkOutOfCorpus("--out", o_.out_dir, o_.corpus);
  // Its training runs are one process each (it would fail at the baseline, after making
  // its folder).
  if (o_.model.tensor_parallel > 1)
    throw Error(fmt::format("model {}: tensor_parallel is {}, but pgq experiment trains in one process; split the "
                            "model with mpirun and pgq train --tensor-parallel (pgq roofline estimates it on paper)",
                            o_.model.source.empty() ? o_.model.name : o_.model.source, o_.model.tensor_parallel));
  if (o_.from_checkpoint.empty()) {
    kBaselineSteps.check(o_.baseline_steps);
    kExperimentProfileSteps.check(o_.profile_steps, o_.baseline_steps);
  } else {
    kExperimentProfileSteps.check(o_.profile_steps);  // the checkpoint's step bounds nothing
  }
  kFinetuneSteps.check(o_.finetune_steps);
  kTrialSteps.check(o_.trial_steps);
  kExperimentEvalBatches.check(o_.eval_batches);
  kBits.check(o_.bits);
  kLossBudget.check(o_.loss_budget);
  // A trial runs inside the fine-tuning schedule (it ran --finetune-steps and said more).
  if (o_.protocol == ExperimentProtocol::kSearch && o_.trial_steps > o_.finetune_steps)
    throw Error(fmt::format("--trial-steps {} is more than --finetune-steps {}: a search trial is a shortened "
                            "fine-tune; give at most {} or raise --finetune-steps",
                            o_.trial_steps, o_.finetune_steps, o_.finetune_steps));
  validateOptimizerConfig(o_.optimizer);
  for (double f : o_.fractions) kFraction.check(f);
  // Bounded so that the steps of all recipes together stay far inside int64.
  if (static_cast<int64_t>(o_.fractions.size() + o_.extra_policies.size()) > kMaxExtraRecipes)
    throw Error(fmt::format("--fractions and --policy: {} recipes besides the standard ones, at most {}",
                            o_.fractions.size() + o_.extra_policies.size(), kMaxExtraRecipes));
  if (o_.backward_rounding != "sr" && o_.backward_rounding != "rtn")
    throw Error(fmt::format("--backward-rounding must be sr or rtn, got '{}'", o_.backward_rounding));
  // Unknown names fail now, and names whose runs would share a folder with the standard
  // recipes' or each other's (makeRecipes checks the thresholded ones too).
  std::map<std::string, std::string> slugs = {{runSlug(kF32), kF32}};
  for (const char* standard : {"F", "F+B", "F+B_SR"}) slugs.emplace(runSlug(standard), standard);
  for (const std::string& p : o_.extra_policies) {
    const std::string name = loadPolicy(p).name;
    const auto [at, fresh] = slugs.emplace(runSlug(name), name);
    if (!fresh)
      throw Error(fmt::format("--policy {}: its name '{}' and the policy '{}' would share the run folder runs/{}; "
                              "rename it",
                              p, name, at->second, at->first));
  }
  kTokenScale.check(o_.token_scale);
  const bool orderings = o_.protocol == ExperimentProtocol::kOrderings;
  if (((o_.metric && *o_.metric != Metric::kSqnr) || orderings || !o_.ordering_metrics.empty()) &&
      !o_.profile_metrics)
    throw Error(fmt::format("--metric {} and --orderings need the statistics of the metrics beyond SQNR: drop "
                            "--no-profile-metrics",
                            nameOf(o_.metric.value_or(Metric::kSqnr))));
  if (orderings) {
    kRandomOrderings.check(o_.random_orderings);
    kParetoSteps.check(o_.pareto_steps);
    if (o_.pareto_steps != 0 && (o_.pareto_steps < 2 || o_.pareto_steps > o_.finetune_steps))
      throw Error(fmt::format("--pareto-steps must be 0 (no Pareto estimate) or in [2, --finetune-steps = {}], got {}",
                              o_.finetune_steps, o_.pareto_steps));
    if (o_.ordering_direction != "bwd" && o_.ordering_direction != "fwd")
      throw Error(fmt::format("--ordering-direction must be bwd or fwd, got '{}'", o_.ordering_direction));
    if (o_.ordering_points.empty()) throw Error("--points: give at least one fraction of the candidates");
    for (double f : o_.ordering_points) {
      if (!(f > 0 && f < 1)) throw Error(fmt::format("--points: each fraction must be in (0, 1), got {}", f));
    }
  }
  HardwareModel hw = loadHardwareModel(o_.hardware);
  // Every recipe of the experiment is in this scheme: one the hardware lacks would keep
  // every GEMM in high precision.
  const FormatFamily family = familyOf(o_.scheme);
  if (!hw.runsFamily(family))
    throw Error(fmt::format("--scheme {}: hardware '{}' does not run {} natively (it runs: {}); choose a --hardware "
                            "that does (e.g. h100-sxm for fp8, b200 for mxfp8)",
                            o_.scheme, hw.name, family, fmt::join(hw.formats, ", ")));
  // Its report's figures are drawn last: without gnuplot, the runs would be trained first.
  if (o_.protocol != ExperimentProtocol::kSearch) requireGnuplot("pgq experiment draws its figures with gnuplot");
}

// The folder remembers the options that shape its results; running again with other
// ones would mix incomparable runs.
void Experiment::recordOptions() const {
  // The model config, indented as a YAML block.
  std::string model;
  for (char c : o_.model.toYaml()) model += c == '\n' ? std::string("\n  ") : std::string(1, c);
  std::string text = fmt::format(
      "# pgq experiment: the options its results depend on\nmodel: |\n  {}\ncorpus: {}\nbaseline: {}\n"
      "profile_steps: {}\nfinetune_steps: {}\nlr: {}\nwarmup: {}\nthreads: {}\nbits: {}\ngranularity: {}\n"
      "backward_rounding: {}\n",
      model, o_.corpus, o_.from_checkpoint.empty() ? std::to_string(o_.baseline_steps) : o_.from_checkpoint,
      o_.profile_steps, o_.finetune_steps, o_.optimizer.lr, o_.optimizer.warmup, omp_get_max_threads(), o_.bits,
      o_.granularity.text(), o_.backward_rounding);
  // Options added later are written only when set, so that older folders still resume.
  if (o_.metric) text += fmt::format("metric: {}\n", nameOf(*o_.metric));
  if (o_.profile_metrics) text += "profile_metrics: true\n";
  if (o_.scheme != Scheme::kInt8) text += fmt::format("scheme: {}\n", o_.scheme);
  if (o_.token_scale != 1.0) text += fmt::format("token_scale: {}\n", o_.token_scale);
  if (o_.hardware != ExperimentOptions{}.hardware) text += fmt::format("hardware: {}\n", o_.hardware);
  // The file, not only its path: a checkpoint replaced at the same path is another baseline.
  if (!o_.from_checkpoint.empty())
    text += fmt::format("baseline_checkpoint: \"{}\"\n", checkpointIdentity(o_.from_checkpoint));
  const std::string fingerprint = fmt::format("corpus_fingerprint: {:016x}\n", corpus_fingerprint_);
  text += fingerprint;
  std::string path = (fs::path(o_.out_dir) / "experiment.yaml").string();
  // A folder where nothing was done yet (a first attempt refused, e.g. a --seq longer
  // than the corpus) takes the new options.
  const fs::path out(o_.out_dir);
  const bool started = fs::exists(out / "baseline") || fs::exists(out / "profile.yaml") || fs::exists(out / "runs");
  if (fs::exists(path) && started) {
    const std::string recorded = readTextFile(path, InputKind::kExperimentOptions);
    // A folder made before session 16 has no corpus_fingerprint: its corpus is not checked.
    if (recorded.find("\ncorpus_fingerprint: ") == std::string::npos) text.erase(text.size() - fingerprint.size());
    if (recorded != text) {
      // The first line that differs says which option.
      std::istringstream theirs(recorded), ours(text);
      std::string a, b;
      int line = 0;
      for (bool more_a = true, more_b = true; more_a || more_b;) {
        more_a = static_cast<bool>(std::getline(theirs, a));
        more_b = static_cast<bool>(std::getline(ours, b));
        ++line;
        if (!more_a) a.clear();
        if (!more_b) b.clear();
        if (a != b) break;
      }
      throw Error(fmt::format("{}:{}: the experiment there was made with other options: '{}' there, '{}' now; use the "
                              "same options to resume it, or another --out",
                              path, line, a, b));
    }
    return;
  }
  writeFileAtomically(path, text);
}

// The warmup of a schedule of `steps`: the experiment's (a fifth of the baseline, at
// most 100), shortened when a baseline checkpoint of few steps (--from-checkpoint) makes
// the whole schedule shorter than that; the user gives no --warmup here.
int64_t Experiment::scheduleWarmup(int64_t steps) const { return std::min(o_.optimizer.warmup, steps); }

TrainOptions Experiment::trainOptions(const std::string& dir) const {
  TrainOptions t;
  t.model = o_.model;
  t.corpus = o_.corpus;
  t.optimizer = o_.optimizer;
  t.eval_every = 0;
  t.eval_batches = o_.eval_batches;
  t.checkpoint_every = 50;
  t.out_dir = dir;
  t.progress = o_.progress;
  t.log_every = 100;
  t.resume = fs::exists(RunLayout{dir}.checkpoint());
  return t;
}

void Experiment::phase(const std::string& what, int64_t steps, bool done) {
  double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  std::string eta = step_ms_estimate_ > 0
                        ? fmt::format(", ETA {}", durationText(static_cast<double>(steps_left_) * step_ms_estimate_ / 1e3))
                        : "";
  const std::string size = done ? ": already done" : fmt::format(" ({} steps)", steps);
  fmt::print(stderr, "\n[{}/{}] {}{} | elapsed {}{}\n", ++phase_, phases_, what, size, durationText(elapsed), eta);
  steps_left_ = std::max<int64_t>(0, steps_left_ - steps);
}

void Experiment::baseline() {
  std::string dir = (fs::path(o_.out_dir) / "baseline").string();
  std::string profile = (fs::path(o_.out_dir) / "profile.yaml").string();
  if (!o_.from_checkpoint.empty()) {
    baseline_checkpoint_ = o_.from_checkpoint;
    baseline_step_ = from_checkpoint_step_;  // read and checked by run()
  } else {
    baseline_checkpoint_ = RunLayout{dir}.checkpoint();
    baseline_step_ = o_.baseline_steps;
  }
  // A given checkpoint is the baseline by definition (its step was read above); our own
  // is done once it reached the baseline's steps.
  if (fs::exists(profile) && fs::exists(baseline_checkpoint_) &&
      (!o_.from_checkpoint.empty() || loadCheckpoint(baseline_checkpoint_).step >= baseline_step_)) {
    phase("baseline f32 training and profile", 0, true);
    return;
  }
  TrainOptions t = trainOptions(dir);
  // Every run plans the same schedule: baseline then fine-tuning, so a fine-tune run
  // continues exactly where the baseline stopped.
  t.steps = baseline_step_ + o_.finetune_steps;
  t.optimizer.warmup = scheduleWarmup(t.steps);
  if (o_.from_checkpoint.empty()) {
    int64_t at = t.resume ? loadCheckpoint(RunLayout{t.out_dir}.checkpoint()).step : 0;
    t.stop_after = o_.baseline_steps - at;
    t.profile_warmup = o_.baseline_steps - o_.profile_steps;
    if (t.resume && at >= o_.baseline_steps)
      // The trainer saves its last checkpoint, then the profile: killed in between.
      throw Error(fmt::format("{}: the baseline finished but its profile {} was not written (interrupted, or "
                              "removed since); remove {} to redo the baseline",
                              dir, profile, dir));
    if (t.resume && at > t.profile_warmup) {
      // Interrupted inside the profile window: the profile needs its steps from before it.
      throw Error(fmt::format("{}: the baseline stopped inside its profile window; remove {} to redo it", dir, dir));
    }
  } else {
    // Profile steps after the given checkpoint; the fine-tunes start from the checkpoint.
    t.resume = false;
    t.init_from = o_.from_checkpoint;
    t.stop_after = o_.profile_steps;
    t.profile_warmup = baseline_step_;
    fs::remove_all(dir);
  }
  t.profile_steps = o_.profile_steps;
  t.profile_out = profile;
  t.profile.bits = o_.bits;
  t.profile.granularity = o_.granularity;
  if (o_.scheme != Scheme::kInt8) t.profile.candidates = {o_.scheme};
  t.profile.metrics = o_.profile_metrics;
  // The gradient-weighted metric weighs by the weight gradients' norms: their statistics.
  t.profile.outputs = o_.profile_metrics;
  phase(o_.from_checkpoint.empty() ? "baseline f32 training, profiling its last steps" : "profiling from the checkpoint",
        t.stop_after);
  TrainResult r = train(t);
  if (!r.history.empty()) {
    double ms = 0;
    for (size_t i = 1; i < r.history.size(); ++i) ms += r.history[i].step_ms;
    if (r.history.size() > 1) step_ms_estimate_ = ms / static_cast<double>(r.history.size() - 1);
  }
}

Profile Experiment::profile() const {
  Profile p = loadProfile((fs::path(o_.out_dir) / "profile.yaml").string());
  checkProfileModel(p, o_.model.name, o_.model.toYaml(), o_.model.source);
  return o_.token_scale == 1.0 ? p : scaleTokens(p, o_.token_scale);
}

std::vector<RecipeRun> Experiment::makeRecipes() {
  Profile profile = this->profile();
  HardwareModel hw = loadHardwareModel(o_.hardware);
  // The backward candidates' SQNR in the formats the thresholded recipes would run,
  // lowest first.
  std::vector<double> sqnr =
      candidateSqnrs(profile, hw, policy(o_.backward_rounding == "sr" ? "F+B_SR" : "F+B")).bwd;
  std::vector<std::string> policies = {"F", "F+B", "F+B_SR"};
  // Said, since the progress count drops by two runs per fraction here.
  if (sqnr.empty() && !o_.fractions.empty())
    spdlog::warn("no backward GEMM is a candidate on hardware '{}': the {} recipes of the fractions {} are left out",
                 hw.name, 2 * o_.fractions.size(), fmt::join(o_.fractions, ", "));
  for (double f : o_.fractions) {
    if (sqnr.empty()) break;
    size_t n = std::clamp<size_t>(static_cast<size_t>(std::lround(f * static_cast<double>(sqnr.size()))), 1,
                                  sqnr.size() - 1);
    // Quantize the n highest (min SQNR > the (count-n)th lowest) or the n lowest.
    double high = sqnr[sqnr.size() - n - 1], low = sqnr[n];
    std::string b = o_.backward_rounding == "sr" ? "F+B_SR" : "F+B";
    policies.push_back(fmt::format("{}>{:.6g}", b, high));
    policies.push_back(fmt::format("{}<{:.6g}", b, low));
  }
  for (const std::string& p : o_.extra_policies) policies.push_back(p);
  fs::create_directories(fs::path(o_.out_dir) / "recipes");
  std::vector<RecipeRun> out;
  std::map<std::string, std::string> slugs;  // run folder -> the policy that has it
  for (const std::string& p : policies) {
    Policy pol = policy(p);
    // Names that differ only in ' ', '/' or ':' would share a run folder.
    const auto [at, fresh] = slugs.emplace(runSlug(pol.name), pol.name);
    if (!fresh)
      throw Error(fmt::format("policies '{}' and '{}' would share the run folder runs/{}; rename one", at->second,
                              pol.name, at->first));
    Recipe recipe = generateRecipe(profile, hw, pol, "../profile.yaml");
    std::string path = (fs::path(o_.out_dir) / "recipes" / (runSlug(pol.name) + ".yaml")).string();
    writeRecipe(path, recipe);
    out.push_back({pol.name, path, pol.forward.invert || pol.backward.invert});
  }
  return out;
}

RunSummary Experiment::finetune(const std::string& name, const std::string& policy, const std::string& recipe,
                                int64_t steps, bool adversarial) {
  return trainRun((fs::path(o_.out_dir) / "runs" / runSlug(name)).string(), name, policy, recipe, steps, adversarial);
}

RunSummary Experiment::retimeBaseline() {
  return trainRun((fs::path(o_.out_dir) / "timing" / kF32).string(), "f32 (timed again)", kF32, "",
                  std::min(o_.finetune_steps, kRetimeSteps), false);
}

// A finished run is reused only if it is this run: the same recipe text, the same last
// step, the same starting checkpoint (experiment.yaml holds the rest). An edited --policy
// or --hardware file, another --trial-steps, --pareto-steps or --ordering-direction, or a
// replaced --from-checkpoint gives a run of the same name that is another run.
void Experiment::checkFinishedRun(const std::string& dir, const RunSummary& s, const std::string& recipe_hash,
                                  const std::string& start, int64_t last_step) const {
  std::string why;
  if (s.last_step != last_step)
    why = fmt::format("it trained to step {}, this experiment asks for step {}", s.last_step, last_step);
  else if (!s.recipe_hash.empty() && s.recipe_hash != recipe_hash)
    why = fmt::format("its recipe differed from {} (a policy, hardware or option changed since)", s.recipe);
  else if (!s.start.empty() && s.start != start)
    why = fmt::format("it started from another checkpoint than {}", baseline_checkpoint_);
  if (!why.empty())
    throw Error(fmt::format("{}: a finished run of another experiment: {}; remove {} to redo it, or use another --out",
                            (fs::path(dir) / "result.yaml").string(), why, dir));
}

RunSummary Experiment::trainRun(const std::string& dir, const std::string& name, const std::string& policy,
                                const std::string& recipe, int64_t steps, bool adversarial) {
  std::string result = (fs::path(dir) / "result.yaml").string();
  const std::string recipe_hash =
      recipe.empty() ? "" : fmt::format("{:016x}", fnv1a64(readTextFile(recipe, InputKind::kRecipe)));
  const std::string start = checkpointIdentity(baseline_checkpoint_);
  // Every run plans the baseline's schedule; a search trial or a Pareto run stops early.
  const int64_t planned = baseline_step_ + o_.finetune_steps;
  const int64_t target = baseline_step_ + std::min(steps, o_.finetune_steps);
  if (fs::exists(result)) {
    RunSummary s = loadRunSummary(result);
    checkFinishedRun(dir, s, recipe_hash, start, target);
    phase(fmt::format("fine-tune {}", name), steps, true);
    s.adversarial = adversarial;
    noteStepTime(s);
    return s;
  }
  TrainOptions t = trainOptions(dir);
  t.steps = planned;
  t.optimizer.warmup = scheduleWarmup(t.steps);
  if (!t.resume) t.init_from = baseline_checkpoint_;
  t.recipe_path = recipe;
  phase(fmt::format("fine-tune {}", name), steps);
  // stop_after counts from the step a resumed run continues at. A run that finished
  // training but not its summary (interrupted in between) only needs the summary.
  const int64_t at = t.resume ? loadCheckpoint(RunLayout{t.out_dir}.checkpoint()).step : baseline_step_;
  t.stop_after = target < planned ? target - at : 0;
  if (at < target) train(t);
  RunSummary s = summarizeRun(name, policy, recipe, readMetrics(RunLayout{dir}.metrics()));
  s.adversarial = adversarial;
  s.recipe_hash = recipe_hash;
  s.start = start;
  if (!recipe.empty()) {
    Recipe r = loadRecipe(recipe);
    s.fwd_quantized = r.summary.fwd_quantized;
    s.bwd_quantized = r.summary.bwd_quantized;
    s.fwd_total = r.summary.fwd_total;
    s.bwd_total = r.summary.bwd_total;
  }
  writeRunSummary(result, s);
  noteStepTime(s);
  // As a resumed experiment will read it (9 significant digits), so that reports made
  // now and after a resume are the same.
  RunSummary written = loadRunSummary(result);
  written.adversarial = adversarial;
  return written;
}

void Experiment::search(const Profile& profile, const HardwareModel& hw) {
  std::vector<RunSummary> trials;
  RunSummary base = finetune("trial f32", kF32, "", o_.trial_steps);
  base.name = kF32;
  auto trial = [&](double tf, double tb) {
    std::string policy = fmt::format("F>{:.6g}+B_SR>{:.6g}", tf, tb);
    for (const RunSummary& t : trials)
      if (t.policy == policy) return t;
    Recipe recipe = generateRecipe(profile, hw, this->policy(policy), "../profile.yaml");
    std::string path = (fs::path(o_.out_dir) / "recipes" / (runSlug("trial " + policy) + ".yaml")).string();
    fs::create_directories(fs::path(path).parent_path());
    writeRecipe(path, recipe);
    RunSummary s = finetune("trial " + policy, policy, path, o_.trial_steps);
    s.within_budget = s.mean_loss <= base.mean_loss * (1 + o_.loss_budget);
    trials.push_back(s);
    return s;
  };
  // The distinct min-input SQNRs of each direction's candidates (thresholds between
  // them change the recipe), with 0 (quantize all).
  CandidateSqnrs all = candidateSqnrs(profile, hw, policy("F+B_SR"));
  std::vector<double> fwd = std::move(all.fwd), bwd = std::move(all.bwd);
  for (auto* v : {&fwd, &bwd}) {
    v->insert(v->begin(), 0.0);  // SQNRs are >= 0, so the list stays sorted
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  // Bisect one direction: the lowest threshold (most GEMMs in int8) within budget,
  // assuming a higher threshold never increases the loss. Starts at the prior.
  auto bisect = [&](std::vector<double>& values, double prior, auto make) {
    size_t lo = 0, hi = values.size();  // thresholds values[i]: i == size keeps all
    size_t start = static_cast<size_t>(std::lower_bound(values.begin(), values.end(), prior) - values.begin());
    start = std::min(start, values.size() - 1);
    // The prior first, then halve the interval on the side it points to.
    size_t probe = start;
    size_t best = values.size();
    while (lo < hi) {
      RunSummary s = make(values[probe]);
      if (s.within_budget) {
        best = probe;
        hi = probe;
      } else {
        lo = probe + 1;
      }
      probe = lo + (hi - lo) / 2;
    }
    return best < values.size() ? values[best] : values.back() * 2 + 1;
  };
  double tb = bisect(bwd, 1.0, [&](double t) { return trial(20.0, t); });
  double tf = bisect(fwd, 20.0, [&](double t) { return trial(t, tb); });
  RunSummary best = trial(tf, tb);
  trials.insert(trials.begin(), base);
  writeSearchReport(o_.out_dir, trials, best, o_.loss_budget, quantizedIn());
}

Policy Experiment::directionPolicy() const {
  const bool bwd = o_.ordering_direction == "bwd";
  Policy p = policy(bwd ? (o_.backward_rounding == "sr" ? "F+B_SR" : "F+B") : "F");
  p.name = bwd ? (o_.backward_rounding == "sr" ? "B_SR" : "B") : "F";
  p.forward.quantize = !bwd;
  p.backward.quantize = bwd;
  return p;
}

std::string Experiment::orderings(const Profile& profile, const HardwareModel& hw) {
  const bool bwd = o_.ordering_direction == "bwd";
  const Policy base = directionPolicy();
  // The candidates: what the roofline keeps in the studied direction.
  Recipe all = generateRecipe(profile, hw, base, "../profile.yaml");
  std::vector<std::string> candidates;
  for (const RecipeEntry& e : all.entries) {
    const GemmProfile* g = profile.find(e.label);
    if (e.decision == Decision::kQuantize && (g->direction != GemmDirection::kFwd) == bwd) candidates.push_back(e.label);
  }
  const int64_t n_all = static_cast<int64_t>(candidates.size());
  if (n_all < 2)
    throw Error(fmt::format("--orderings: only {} {} GEMM(s) pay off on hardware {}; nothing to order (larger "
                            "GEMMs pay off more: a larger model, or --token-scale for a GPU's batch)",
                            n_all, o_.ordering_direction, hw.name));
  std::vector<int64_t> counts;
  for (double f : o_.ordering_points)
    counts.push_back(std::clamp<int64_t>(std::llround(f * static_cast<double>(n_all)), 1, n_all - 1));
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());

  // The orderings. Metrics first (the ones asked for, else every one the profile gives).
  std::vector<Ordering> orders;
  std::vector<Metric> metrics = o_.ordering_metrics;
  if (metrics.empty())
    for (Metric m : allMetrics()) {
      try {
        requireMetric(profile, m, "profile.yaml");
        metrics.push_back(m);
      } catch (const Error&) {
      }
    }
  if (std::find(metrics.begin(), metrics.end(), Metric::kSqnr) == metrics.end()) metrics.insert(metrics.begin(), Metric::kSqnr);
  std::map<std::string, double> sqnr_scores;
  for (Metric m : metrics) {
    requireMetric(profile, m, (fs::path(o_.out_dir) / "profile.yaml").string());
    Policy pm = base;
    pm.metric = m;
    Recipe r = generateRecipe(profile, hw, pm, "../profile.yaml");
    std::map<std::string, double> scores;
    for (const RecipeEntry& e : r.entries)
      if (std::find(candidates.begin(), candidates.end(), e.label) != candidates.end()) scores[e.label] = e.metric_value;
    if (m == Metric::kSqnr) sqnr_scores = scores;
    orders.push_back({std::string(nameOf(m)), OrderingKind::kMetric, orderByScore(scores)});
  }
  {
    std::vector<std::string> low_first = orderByScore(sqnr_scores);
    std::reverse(low_first.begin(), low_first.end());
    orders.push_back({"adversarial", OrderingKind::kAdversarial, low_first});
  }
  for (int64_t k = 1; k <= o_.random_orderings; ++k)
    orders.push_back({fmt::format("random {}", k), OrderingKind::kRandom,
                      randomOrder(candidates, o_.model.seed * 1000003 + static_cast<uint64_t>(k))});

  fs::create_directories(fs::path(o_.out_dir) / "recipes");
  // A recipe quantizing exactly `chosen`: the direction policy with the ordering's cut
  // as scores (1 in, 0 out) and a threshold between them.
  auto recipeFor = [&](const std::string& name, const std::vector<std::string>& chosen) {
    std::map<std::string, double> scores;
    for (const std::string& c : candidates) scores[c] = 0;
    for (const std::string& c : chosen) scores[c] = 1;
    Policy p = base;
    p.name = name;
    (bwd ? p.backward : p.forward).threshold = 0.5;
    Recipe r = generateRecipe(profile, hw, p, "../profile.yaml", &scores);
    std::string path = (fs::path(o_.out_dir) / "recipes" / (runSlug(name) + ".yaml")).string();
    writeRecipe(path, r);
    return std::make_pair(path, r);
  };

  int64_t runs_planned = 2 + static_cast<int64_t>(orders.size() * counts.size()) +
                         (o_.pareto_steps > 0 ? n_all + 1 : 0);
  phases_ = phase_ + static_cast<int>(runs_planned);
  steps_left_ = (2 + static_cast<int64_t>(orders.size() * counts.size())) * o_.finetune_steps +
                (o_.pareto_steps > 0 ? (n_all + 1) * o_.pareto_steps : 0);

  // The Pareto estimate: every candidate alone, short runs.
  OrderingsReport report;
  if (o_.pareto_steps > 0) {
    RunSummary f32 = finetune("solo f32", kF32, "", o_.pareto_steps);
    struct Solo {
      std::string label;
      double delta = 0, saved_ms = 0, ratio = 0;
    };
    std::vector<Solo> solos;
    for (const std::string& c : candidates) {
      auto [path, r] = recipeFor("solo " + c, {c});
      RunSummary s = finetune("solo " + c, "solo " + c, path, o_.pareto_steps);
      Solo solo{c, s.mean_loss - f32.mean_loss, r.summary.est_gemm_ms - r.summary.est_gemm_quantized_ms, 0};
      solo.ratio = solo.delta / std::max(solo.saved_ms, 1e-9);
      solos.push_back(solo);
    }
    std::map<std::string, double> scores;
    for (const Solo& solo : solos) scores[solo.label] = -solo.ratio;
    orders.push_back({"pareto", OrderingKind::kPareto, orderByScore(scores)});
    std::stable_sort(solos.begin(), solos.end(), [](const Solo& a, const Solo& b) { return a.ratio < b.ratio; });
    report.pareto_table = "| rank | GEMM | loss change alone | est. saving (ms) | change per ms saved |\n|---|---|---|---|---|\n";
    for (size_t i = 0; i < solos.size(); ++i)
      report.pareto_table += fmt::format("| {} | {} | {:+.5f} | {:.3f} | {:+.5f} |\n", i + 1, solos[i].label,
                                         solos[i].delta, solos[i].saved_ms, solos[i].ratio);
    report.pareto_cost_steps = static_cast<double>((n_all + 1) * o_.pareto_steps);
  }

  RunSummary f32 = finetune(kF32, kF32, "", o_.finetune_steps);
  auto point = [&](const RunSummary& s, int64_t count, double speedup) {
    return CurvePoint{count, speedup, s.step_ms, s.mean_loss, 100.0 * (s.mean_loss / f32.mean_loss - 1.0),
                      s.final_val_loss, runSlug(s.name)};
  };
  auto [all_path, all_recipe] = recipeFor(fmt::format("all {}", n_all), candidates);
  RunSummary all_run = finetune(fmt::format("all {}", n_all), "all", all_path, o_.finetune_steps);
  const CurvePoint all_point = point(all_run, n_all, all_recipe.summary.estimatedStepSpeedup());
  // Two orderings that cut the same set share its run.
  std::map<std::vector<std::string>, std::string> run_of_set;
  for (const Ordering& ord : orders) {
    Curve curve{ord.name, ord.kind, {}, 0};
    curve.points.push_back(point(f32, 0, 1.0));
    for (int64_t n : counts) {
      std::vector<std::string> chosen(ord.labels.begin(), ord.labels.begin() + n);
      std::vector<std::string> key = chosen;
      std::sort(key.begin(), key.end());
      std::string name = fmt::format("{} {}", ord.name, n);
      auto it = run_of_set.try_emplace(key, name).first;
      auto [path, r] = recipeFor(it->second, chosen);
      RunSummary s = finetune(it->second, it->second, path, o_.finetune_steps);
      curve.points.push_back(point(s, n, r.summary.estimatedStepSpeedup()));
    }
    curve.points.push_back(all_point);
    curve.area = curveArea(curve.points);
    report.curves.push_back(curve);
  }
  report.orders = orders;
  report.out_dir = o_.out_dir;
  report.direction = bwd ? "backward" : "forward";
  report.setting = fmt::format("{}, {} gradients, on {}{}", settingName(), o_.backward_rounding, hw.name,
                               o_.token_scale == 1.0 ? "" : fmt::format(" at {}x the profiled tokens", o_.token_scale));
  report.candidates = n_all;
  // A GPU's estimate, or a profile without a plain step time, has the GEMMs' speedup only.
  report.step_speedup = all_recipe.summary.measured_step_ms > 0;
  report.finetune_steps = o_.finetune_steps;
  writeOrderingsReport(report);
  return (fs::path(o_.out_dir) / "orderings.md").string();
}

ExperimentResult Experiment::run() {
  validate();
  if (!o_.from_checkpoint.empty()) {  // its model, before any work
    const Checkpoint ckpt = loadCheckpoint(o_.from_checkpoint);
    checkCheckpointModel(ckpt.model_config, o_.model, o_.from_checkpoint, /*same_run=*/false);
    from_checkpoint_step_ = ckpt.step;
  }
  // A mistyped --corpus is refused before the results folder is made (its content is
  // checked when the baseline reads it).
  {
    const std::string corpus = resolveCorpusPath(o_.corpus);
    std::error_code ec;
    const fs::file_status st = fs::status(corpus, ec);
    if (!fs::is_regular_file(st) && !fs::is_directory(st))
      throw Error(fmt::format("corpus {}: {}", corpus, fs::exists(st) ? "is neither a file nor a folder"
                                                                      : "no such file or directory"));
    // Its content, which experiment.yaml records: a corpus edited since the runs were
    // made is another experiment.
    corpus_fingerprint_ = loadCorpus(o_.corpus).fingerprint;
  }
  // The baseline profiles, so it holds the instrumented training graph as well.
  checkTrainingMemory(o_.model, estimateTrainingMemory(o_.model, o_.eval_batches, true), availableMemoryBytes());
  std::error_code ec;
  fs::create_directories(o_.out_dir, ec);
  if (ec) throw Error(fmt::format("{}: cannot create the results folder: {}", o_.out_dir, ec.message()));
  // Held for the whole experiment; its training runs lock their own subdirectories.
  RunDirLock lock(o_.out_dir);
  recordOptions();
  const int n_recipes = 3 + 2 * static_cast<int>(o_.fractions.size()) + static_cast<int>(o_.extra_policies.size());
  const int64_t baseline_steps = o_.from_checkpoint.empty() ? o_.baseline_steps : o_.profile_steps;
  switch (o_.protocol) {
    case ExperimentProtocol::kRecipes:
      // The baseline, the f32 fine-tune, the recipes' and the f32 step timed again.
      phases_ = 3 + n_recipes;
      steps_left_ = baseline_steps + (1 + n_recipes) * o_.finetune_steps + std::min(o_.finetune_steps, kRetimeSteps);
      break;
    case ExperimentProtocol::kSearch:
      phases_ = 9;
      steps_left_ = baseline_steps + 8 * o_.trial_steps;
      break;
    case ExperimentProtocol::kOrderings:
      phases_ = 1;  // counted once the candidates are known
      steps_left_ = baseline_steps + (1 + n_recipes) * o_.finetune_steps;
      break;
  }
  baseline();
  switch (o_.protocol) {
    case ExperimentProtocol::kRecipes: return runRecipes();
    case ExperimentProtocol::kSearch: return runSearch();
    case ExperimentProtocol::kOrderings: return runOrderings();
  }
  throw InternalError("unknown experiment protocol");
}

ExperimentResult Experiment::runOrderings() {
  ExperimentResult result;
  result.report_path = orderings(profile(), loadHardwareModel(o_.hardware));
  double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  fmt::print(stderr, "\norderings done in {}\n", durationText(elapsed));
  return result;
}

ExperimentResult Experiment::runSearch() {
  search(profile(), loadHardwareModel(o_.hardware));
  ExperimentResult result;
  result.report_path = (fs::path(o_.out_dir) / "SEARCH.md").string();
  return result;
}

ExperimentResult Experiment::runRecipes() {
  std::vector<RecipeRun> recipes = makeRecipes();
  phases_ = phase_ + 2 + static_cast<int>(recipes.size());
  std::vector<RunSummary> runs;
  runs.push_back(finetune(kF32, kF32, "", o_.finetune_steps));
  for (const RecipeRun& r : recipes) runs.push_back(finetune(r.name, r.name, r.path, o_.finetune_steps, r.adversarial));
  ReportInputs in;
  in.f32_again = retimeBaseline();
  in.out_dir = o_.out_dir;
  in.model = o_.model;
  in.corpus = o_.corpus;
  in.hardware = o_.hardware;
  in.baseline_steps = baseline_step_;
  in.finetune_steps = o_.finetune_steps;
  in.profile_steps = o_.profile_steps;
  in.threads = omp_get_max_threads();
  in.fractions = o_.fractions;
  in.sqnr_format = o_.scheme == Scheme::kInt8
                       ? o_.granularity.withBits(o_.bits, Rounding::kNearest)
                       : schemeFormats(o_.scheme, Rounding::kNearest, Rounding::kNearest).operand;
  const Metric metric = o_.metric.value_or(defaultMetric(profile()));
  in.metric = metric == Metric::kSqnr ? "SQNR" : std::string(nameOf(metric));
  in.quantized_in = quantizedIn();
  in.runs = runs;
  ExperimentResult result = writeExperimentReport(in);
  if (const std::string busy = timingCheck(in.runs, *in.f32_again); !busy.empty())
    fmt::print(stderr, "\nwarning: {}\n", busy);
  double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  fmt::print(stderr, "\nexperiment done in {}\n", durationText(elapsed));
  return result;
}

}  // namespace

ExperimentResult runExperiment(const ExperimentOptions& options) { return Experiment(options).run(); }

}  // namespace pgq
