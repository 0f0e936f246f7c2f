// `pgq train`: train a model config on a text corpus.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/number_flags.h"
#include "cli/profile_flags.h"
#include "frontend/model_config.h"
#include "runtime/mpi.h"
#include "runtime/run_layout.h"
#include "runtime/trainer.h"

namespace pgq::cli {
namespace {

struct TrainArgs {
  ModelFlags model{"small", {}};
  std::string precision = "f32";
  std::optional<int64_t> seed;
  std::optional<int64_t> warmup;
  TrainOptions options;
};

// Per-op time split: which kinds of kernels the step spends its time in. Prints nothing
// when no step of this kind ran.
void printOpProfile(const std::vector<OpTiming>& op_profile, std::string_view steps_kind) {
  std::map<std::string, double> by_kind, bytes_by_kind;
  double total = 0, gemm = 0;
  int64_t calls = 0;
  for (const OpTiming& p : op_profile) {
    const std::string& kind = p.kind;
    by_kind[kind] += p.total_ms;
    bytes_by_kind[kind] += p.bytes * static_cast<double>(p.calls);
    total += p.total_ms;
    if (p.op == Op::kMatMul || p.op == Op::kQMatMul) gemm += p.total_ms;
    calls = std::max(calls, p.calls);
  }
  if (calls == 0) return;
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [kind, ms] : by_kind) rows.emplace_back(ms, kind);
  std::sort(rows.rbegin(), rows.rend());
  fmt::print("\nper-op time split of the {} ({} steps, kernel time {:.1f} ms/step, GEMMs {:.0f}%):\n", steps_kind,
             calls, total / static_cast<double>(calls), 100.0 * gemm / std::max(total, 1e-9));
  // GB/s: the operands' and results' bytes over the kernel time, what a memory-bound
  // kernel is judged by (a GEMM reads its operands more than once: its figure is low).
  // A kind whose kernels take no time (their work runs elsewhere: a scatter_add its add
  // makes, a weight quantization the optimizer makes) shows no rate.
  auto rate = [](double bytes, double ms) {
    return ms < 1e-3 ? std::string("-") : fmt::format("{:.1f}", bytes / (ms * 1e6));
  };
  fmt::print("  {:<22} {:>10} {:>7} {:>7}\n", "op", "ms/step", "share", "GB/s");
  for (const auto& [ms, kind] : rows)
    fmt::print("  {:<22} {:>10.2f} {:>6.1f}% {:>7}\n", kind, ms / static_cast<double>(calls),
               100.0 * ms / std::max(total, 1e-9), rate(bytes_by_kind[kind], ms));
  // GEMMs by label: where the GEMM time goes and how fast each shape runs.
  std::vector<const OpTiming*> gemms;
  for (const OpTiming& p : op_profile)
    if ((p.op == Op::kMatMul || p.op == Op::kQMatMul) && p.calls > 0) gemms.push_back(&p);
  std::sort(gemms.begin(), gemms.end(), [](auto* a, auto* b) { return a->total_ms > b->total_ms; });
  fmt::print("\n  {:<32} {:>6} {:>10} {:>9}\n", "GEMM (slowest 12)", "dtype", "ms/step", "GFLOP/s");
  for (size_t i = 0; i < std::min<size_t>(12, gemms.size()); ++i) {
    double ms = gemms[i]->total_ms / static_cast<double>(gemms[i]->calls);
    fmt::print("  {:<32} {:>6} {:>10.2f} {:>9.1f}\n", gemms[i]->label, gemms[i]->dtype,
               ms, gemms[i]->flops / (ms * 1e6));
  }
  // The other kernels by node: which quantizations and elementwise ops are slow, and
  // whether they run at the memory's speed.
  std::vector<const OpTiming*> others;
  for (const OpTiming& p : op_profile)
    if (p.op != Op::kMatMul && p.op != Op::kQMatMul && p.calls > 0) others.push_back(&p);
  std::sort(others.begin(), others.end(), [](auto* a, auto* b) { return a->total_ms > b->total_ms; });
  // ms/step per call of the node; one that ran in fewer steps than the rest (a weight's
  // quantization, which the optimizer makes after the first step) says in how many.
  constexpr size_t kOthers = 40;
  fmt::print("\n  {:<40} {:<22} {:>8} {:>7} {:>7}\n", fmt::format("other kernels (slowest {})", kOthers), "op",
             "ms/step", "MB", "GB/s");
  for (size_t i = 0; i < std::min(kOthers, others.size()); ++i) {
    double ms = others[i]->total_ms / static_cast<double>(others[i]->calls);
    fmt::print("  {:<40} {:<22} {:>8.2f} {:>7.1f} {:>7}{}\n", others[i]->node, others[i]->kind, ms,
               others[i]->bytes / 1e6, rate(others[i]->bytes, ms),
               others[i]->calls < calls ? fmt::format("  (ran in {} of {} steps)", others[i]->calls, calls) : "");
  }
}

}  // namespace

void addTrainCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a model (preset, YAML config or ONNX file) on a text corpus");
  static TrainArgs args;
  TrainOptions& o = args.options;
  OptimizerConfig& opt = o.optimizer;
  addModelFlags(cmd, args.model);
  cmd->add_option("--corpus", o.corpus,
                  "Text file, directory of text files, pre-split directory (train.txt, val.txt) or 'english' "
                  "(scripts/setup.sh assembles it)")
      ->capture_default_str();
  addNumber(cmd, ranges::kSteps, o.steps, "Total optimizer steps (a resumed run continues to this count)");
  cmd->add_option("--out", o.out_dir, "Run directory: metrics.csv and checkpoint.pgqckpt")
      ->check(kNonEmptyPath)
      ->capture_default_str();
  cmd->add_flag("--resume", o.resume, "Continue the run whose checkpoint is in --out");
  cmd->add_option("--init-from", o.init_from,
                  "Start this run from another run's checkpoint (weights, optimizer state, step); the recipe, --batch and --seed may differ");
  addNumber(cmd, ranges::kStopAfter, o.stop_after,
            "Stop after this many steps of this invocation, with a checkpoint (0: run to --steps)");
  addNumber(cmd, ranges::kCheckpointEvery, o.checkpoint_every, "Checkpoint period in steps (0: at the end only)");
  addNumber(cmd, ranges::kEvalEvery, o.eval_every, "Validation period in steps (0: at the end only)");
  addNumber(cmd, ranges::kEvalBatches, o.eval_batches, "Validation batches per evaluation");
  addNumber(cmd, ranges::kLr, opt.lr, "Peak learning rate");
  addNumber(cmd, ranges::kWarmup, args.warmup,
            fmt::format("Linear warmup steps (default {}, or --steps when that is smaller)", opt.warmup));
  addNumber(cmd, ranges::kMinLrRatio, opt.min_lr_ratio, "Final lr as a fraction of --lr");
  addNumber(cmd, ranges::kWeightDecay, opt.weight_decay, "AdamW decoupled weight decay");
  addNumber(cmd, ranges::kGradClip, opt.grad_clip, "Global gradient norm clip (0: off)");
  cmd->add_option("--precision", args.precision, "GEMM precision: f32 or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  addThreadsFlag(cmd);
  addNumber(cmd, ranges::kSeed, args.seed,
            "Seed of the initialization, data order and rounding (default: the model config's seed)");
  cmd->add_flag("--profile-ops", o.profile_ops, "Time every kernel and print the per-op time split (ms, share, GB/s), the slowest GEMMs and the slowest other kernels");
  addNumber(cmd, ranges::kProfileSteps, o.profile_steps,
            "Stage (i): log GEMM operand statistics for this many steps (0: none; needs --profile-out)");
  addNumber(cmd, ranges::kProfileWarmup, o.profile_warmup, "Steps to train before the logged ones");
  cmd->add_option("--profile-out", o.profile_out, "Profile to write (YAML; a .csv is written beside it)")
      ->check(kNonEmptyPath);
  addProfileFormatFlags(cmd, o.profile, "Also profile");
  addNumber(cmd, ranges::kProfileAmaxHistory, o.profile_amax_history,
            "Amax history length H of the delayed scaling the profile measures (Transformer Engine's "
            "amax_history_len)");
  cmd->add_option("--recipe", o.recipe_path, "Stage (iii): run the GEMMs this recipe chooses in int8 (pgq recipe writes one)")
      ->check(kNonEmptyPath);  // '' (an unset shell variable) is not the flag left out
  cmd->add_option("--hardware", o.hardware,
                  "Hardware model (preset or YAML) the recipe's formats must run exactly on; annotates roofline estimates")
      ->check(kNonEmptyPath);
  cmd->add_flag("!--no-progress", o.progress, "Do not draw the progress bar");
  static double collective_timeout = kDefaultCollectiveTimeoutS;
  addNumber(cmd, ranges::kCollectiveTimeout, collective_timeout,
            "Under mpirun: seconds a collective may wait for the other ranks before the job ends naming the ranks "
            "that do not answer (stopped or hung); 0 waits forever (for a debugger)");
  cmd->callback([cmd] {
    TrainOptions& o = args.options;
    o.profile_flag_given = givenProfileFlag(cmd);
    const auto started = std::chrono::steady_clock::now();
    o.model = loadModel(args.model);  // an ONNX model is imported here, once
    const double model_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    if (args.seed) o.model.seed = static_cast<uint64_t>(*args.seed);
    if (args.warmup) o.optimizer.warmup = *args.warmup;
    else o.optimizer.warmup = std::min(o.optimizer.warmup, o.steps);
    o.precision = args.precision == "bf16" ? Precision::kBf16 : Precision::kF32;
    // Under mpirun: the job's ranks, split into tensor-parallel groups of the model's T.
    std::unique_ptr<Collectives> job;
    if (launchedByMpirun())
      job = makeMpiCollectives(static_cast<int>(o.model.tensor_parallel), INT_MAX, collective_timeout);
    else if (o.model.tensor_parallel > 1) {
      const int64_t t = o.model.tensor_parallel;
      const std::string start = fmt::format("start pgq with mpirun -np {} (or a multiple, for data parallelism)", t);
      if (args.model.overrides.tensor_parallel > 0)
        throw Error(fmt::format("--tensor-parallel {} needs {} processes per model: {}", t, t, start));
      throw Error(fmt::format("model {}: field 'tensor_parallel' is {}, which needs {} processes per model: {}, or "
                              "give --tensor-parallel 1",
                              args.model.spec, t, t, start));
    }
    // A new run in a folder whose earlier run left its metrics but no checkpoint (it was
    // stopped before the first one) would replace those rows without a word.
    if (!o.resume && (!job || job->worldRank() == 0)) {
      const RunLayout layout{o.out_dir};
      std::error_code ec;
      if (std::filesystem::exists(layout.metrics(), ec) && !std::filesystem::exists(layout.checkpoint(), ec))
        throw Error(fmt::format("{} holds the metrics of an earlier run (with no checkpoint to resume); move or "
                                "delete it, or choose another --out",
                                layout.metrics()));
    }
    o.collectives = job.get();
    TrainResult r = train(o);
    if (r.history.empty() || (job && job->worldRank() != 0)) return;
    double ms = 0;
    size_t skip = r.history.size() > 1 ? 1 : 0;  // the first step includes one-time setup
    for (size_t i = skip; i < r.history.size(); ++i) ms += r.history[i].step_ms;
    ms /= static_cast<double>(r.history.size() - skip);
    fmt::print("trained {} to step {}: loss {:.4f}", o.model.name, r.history.back().step, r.history.back().loss);
    if (r.final_val_loss) fmt::print(", val loss {:.4f}", *r.final_val_loss);
    if (r.final_val_bpb) fmt::print(" ({:.4f} bits per byte)", *r.final_val_bpb);
    const int threads = omp_get_max_threads();
    fmt::print("\n{:.1f} ms/step ({:.0f} tokens/s, {} thread{}), peak memory {:.1f} MiB\n", ms,
               static_cast<double>(o.model.tokens()) / (ms / 1000.0), threads, threads == 1 ? "" : "s",
               static_cast<double>(r.memory.peak()) / (1 << 20));
    fmt::print("setup {:.1f} s (model {:.1f} s, graphs, memory and parameters {:.1f} s), first step {:.0f} ms\n",
               (model_ms + r.setup_ms) / 1000.0, model_ms / 1000.0, r.setup_ms / 1000.0, r.history.front().step_ms);
    fmt::print("metrics: {}\ncheckpoint: {}\n", r.metrics_path, r.checkpoint_path);
    if (!r.profile_path.empty())
      fmt::print("profile: {} ({} steps, written in {:.0f} ms); inspect it with: pgq sqnr-table {}\n", r.profile_path,
                 o.profile_steps, r.profile_write_ms, r.profile_path);
    if (o.profile_ops) {
      printOpProfile(r.op_profile, "training steps");
      if (r.optimizer_steps > 0)
        fmt::print("\noutside the graph's kernels ({} steps): gradient norm {:.2f} ms/step, AdamW update {:.2f} "
                   "ms/step{}\n",
                   r.optimizer_steps, r.norm_ms_per_step, r.update_ms_per_step,
                   r.weight_copies_per_step > 0
                       ? fmt::format(" (it also makes {} int8 copies of weights for the next step's GEMMs)",
                                     r.weight_copies_per_step)
                       : std::string());
      printOpProfile(r.profiled_op_profile, "profiled steps (stage i)");
    }
    if (o.profile_ops && job)
      fmt::print("collectives (rank 0, over {} ranks): {:.2f} MB sent per step, {:.1f} ms per step in {:.0f} calls per step\n",
                 job->worldSize(), r.collective_bytes_per_step / 1e6, r.collective_ms_per_step,
                 r.collective_calls_per_step);
  });
}

}  // namespace pgq::cli
