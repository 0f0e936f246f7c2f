// `pgq experiment`: the whole profile-guided loop with the paper's comparisons.
#include <algorithm>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/experiment.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/number_flags.h"
#include "cli/profile_flags.h"
#include "plan/gemm_metric.h"
#include "plan/policy.h"
#include "support/errors.h"

namespace pgq::cli {

namespace {

// The flags of --orderings (Fig. 2, app/orderings.h), as given.
std::string ordering_metrics, points;

void addOrderingsFlags(CLI::App* cmd, ExperimentOptions& o, bool& orderings) {
  cmd->add_flag("--orderings", orderings,
                "Fig. 2: instead of the fixed recipes, cut several orderings of the candidates (every metric, "
                "adversarial, random, Pareto estimate) at the same counts, fine-tune each cut, and write "
                "orderings.md and fig2.png with each ordering's area");
  cmd->add_option("--ordering-direction", o.ordering_direction,
                  "--orderings: the candidates to order, bwd or fwd (the other direction stays f32)")
      ->capture_default_str();
  cmd->add_option("--points", points,
                  fmt::format("--orderings: comma-separated fractions of the candidates to cut at (default {}); "
                              "all of them is always a point",
                              fmt::join(o.ordering_points, ",")))
      ->check(kNonEmptyList);
  cmd->add_option("--ordering-metrics", ordering_metrics,
                  "--orderings: comma-separated metrics to order by (default: every one the profile gives)")
      ->check(kNonEmptyList);
  addNumber(cmd, ranges::kRandomOrderings, o.random_orderings, "--orderings: how many random orderings");
  addNumber(cmd, ranges::kParetoSteps, o.pareto_steps,
            "--orderings: steps of the short run that quantizes each candidate alone, for the Pareto estimate "
            "(0: no estimate; else at least 2 and at most --finetune-steps; costs candidates + 1 runs of this "
            "length)");
}

// The --orderings flags into `o`, refused without --orderings.
void finishOrderingsOptions(CLI::App* cmd, ExperimentOptions& o, bool orderings) {
  if (!ordering_metrics.empty()) {
    for (const std::string& m : listItems("--ordering-metrics", ordering_metrics))
      o.ordering_metrics.push_back(metricFromName(m, "--ordering-metrics"));
  }
  if (!orderings && (!points.empty() || !ordering_metrics.empty() || cmd->count("--random-orderings") ||
                     cmd->count("--pareto-steps") || cmd->count("--ordering-direction")))
    throw Error("--points, --ordering-metrics, --random-orderings, --pareto-steps and --ordering-direction only "
                "apply with --orderings");
  if (!points.empty()) {
    o.ordering_points.clear();
    for (const std::string& f : listItems("--points", points))
      o.ordering_points.push_back(parseNumber(ranges::kOrderingPoint, f));
  }
}

}  // namespace

void addExperimentCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "experiment",
      "Train an f32 baseline, profile it, generate the standard recipes and fine-tune with each; write Table I, the "
      "loss curves, speedup vs loss and a report (or, with --search, find the fastest recipe within a loss budget)");
  static ExperimentOptions o;
  static ModelFlags model{"small", {}};
  static std::string preset = "quick", fractions;
  static std::optional<int64_t> baseline_steps, finetune_steps, trial_steps;
  static std::optional<double> loss_budget;
  static std::optional<int64_t> seed;
  cmd->add_option("--preset", preset,
                  "quick: baseline 200 steps, 60 fine-tuning steps per recipe (a few minutes on 2 cores); "
                  "full: 1000 and 300; paper: the `medium` LLaMA-style model with a subword vocabulary on the "
                  "English corpus (unless --model/--corpus say otherwise), baseline 400 steps, 80 per recipe "
                  "(under an hour on 2 cores)")
      ->check(CLI::IsMember({"quick", "full", "paper"}))
      ->capture_default_str();
  addModelFlags(cmd, model);
  cmd->add_option("--corpus", o.corpus,
                  "Text file, directory of text files, pre-split directory (train.txt, val.txt) or 'english' "
                  "(scripts/setup.sh assembles it)")
      ->capture_default_str();
  cmd->add_option("--out", o.out_dir, "Results folder (an interrupted experiment resumes there)")
      ->check(kNonEmptyPath)
      ->capture_default_str();
  cmd->add_option("--hardware", o.hardware, "Hardware model for the recipes (preset or YAML)")->capture_default_str();
  cmd->add_option("--from-checkpoint", o.from_checkpoint, "Use this baseline checkpoint instead of training one");
  addNumber(cmd, ranges::kBaselineSteps, baseline_steps, "f32 steps before profiling (default: by --preset)");
  addNumber(cmd, ranges::kExperimentProfileSteps, o.profile_steps, "Steps of statistics logging");
  addNumber(cmd, ranges::kFinetuneSteps, finetune_steps, "Fine-tuning steps per recipe (default: by --preset)");
  cmd->add_option("--fractions", fractions,
                  fmt::format("Comma-separated fractions of backward GEMMs for the SQNR and adversarial recipes, each "
                              "in {} (default {})",
                              ranges::kFraction.text(), fmt::join(o.fractions, ",")))
      ->check(kNonEmptyList);
  cmd->add_option("--policy", o.extra_policies, "Also run these policies (names or YAML files); repeatable");
  addNumber(cmd, ranges::kBits, o.bits, "Bits of the int8 formats of every recipe (7-bit side added where needed)");
  cmd->add_option("--backward-rounding", o.backward_rounding,
                  "Gradient rounding of the thresholded recipes: sr (F+B_SR>t, <t) or rtn (F+B>t, <t)")
      ->check(CLI::IsMember({"sr", "rtn"}))
      ->capture_default_str();
  cmd->add_option_function<std::string>(
         "--granularity",
         [](const std::string& text) { o.granularity = parseGranularity("--granularity", text); },
         fmt::format("Scale granularity of every recipe: channel, tensor or block<N>; default {}", o.granularity.text()))
      ->type_name("TEXT");
  cmd->add_option_function<std::string>(
         "--scheme",
         [](const std::string& text) {
           const std::optional<Scheme> scheme = parseScheme(text);
           if (!scheme)
             throw Error(fmt::format("--scheme: unknown format scheme '{}' (expected one of {})", text,
                                     fmt::join(kFormatSchemes, ", ")));
           o.scheme = *scheme;
         },
         fmt::format("Format scheme of every recipe: {} (fp8: e4m3 weights and activations, e5m2 gradients, "
                     "per tensor; FP8/MX run emulated here and need a --hardware that runs them, e.g. h100-sxm); "
                     "default {}",
                     fmt::join(kFormatSchemes, ", "), o.scheme))
      ->type_name("TEXT");
  addNumber(cmd, ranges::kTokenScale, o.token_scale,
            "The recipes' roofline sees this many times the profiled tokens per device (a GPU's batch from this "
            "CPU's profile, as pgq recipe --token-scale); statistics stay as profiled");
  addNumber(cmd, ranges::kLr, o.optimizer.lr, "Peak learning rate");
  addThreadsFlag(cmd);
  addNumber(cmd, ranges::kSeed, seed,
            "Seed of the profiled and fine-tuning runs' data order and rounding (default: the model config's): a "
            "second seed of the same experiment from the same --from-checkpoint");
  static bool search = false, orderings = false;
  cmd->add_flag("--search", search, "Search the forward/backward SQNR thresholds instead of the fixed recipes");
  addNumber(cmd, ranges::kLossBudget, loss_budget,
            "--search (required there): allowed loss increase over f32, e.g. 0.01 for 1%");
  addNumber(cmd, ranges::kTrialSteps, trial_steps,
            fmt::format("--search: fine-tuning steps per trial, at most --finetune-steps (default {}, or "
                        "--finetune-steps if fewer)", o.trial_steps));
  static std::string metric;
  static bool no_profile_metrics = false;
  cmd->add_option("--metric", metric,
                  fmt::format("What the thresholds of the fixed recipes and of --search compare, per GEMM: {} "
                              "(docs/METRICS.md). Default: {}, or sqnr with --no-profile-metrics",
                              metricNames(), nameOf(kDefaultMetric)));
  static bool profile_metrics = false;  // the default; kept so that earlier commands still run
  auto* with_metrics =
      cmd->add_flag("--profile-metrics", profile_metrics, "The profile logs the statistics of every metric (the default)");
  cmd->add_flag("--no-profile-metrics", no_profile_metrics,
                "The profile logs SQNR only (profiled steps 2-5x cheaper; the thresholds then compare SQNR)")
      ->excludes(with_metrics);
  addOrderingsFlags(cmd, o, orderings);
  cmd->add_flag("!--no-progress", o.progress, "Do not draw progress bars");
  cmd->callback([cmd] {
    // The paper preset trains the realistic model where a flag does not name another.
    bool paper = preset == "paper";
    if (paper && cmd->count("--model") == 0) model.spec = "medium";
    if (paper && cmd->count("--corpus") == 0) o.corpus = "english";
    o.model = loadModel(model);
    if (seed) o.model.seed = static_cast<uint64_t>(*seed);
    bool full = preset == "full";
    if (!o.from_checkpoint.empty() && baseline_steps)
      throw Error("--from-checkpoint and --baseline-steps conflict: the checkpoint is the baseline");
    o.baseline_steps = baseline_steps.value_or(paper ? 400 : full ? 1000 : 200);
    o.finetune_steps = finetune_steps.value_or(paper ? 80 : full ? 300 : 60);
    // A trial is a shortened fine-tune: the default never asks for more.
    o.trial_steps = trial_steps.value_or(std::min(o.trial_steps, o.finetune_steps));
    o.optimizer.warmup = std::min<int64_t>(100, std::max<int64_t>(1, o.baseline_steps / 5));
    if (search && orderings) throw Error("--orderings and --search conflict: each chooses its own runs");
    o.protocol = search      ? ExperimentProtocol::kSearch
                 : orderings ? ExperimentProtocol::kOrderings
                             : ExperimentProtocol::kRecipes;
    if (!search && (loss_budget || trial_steps))
      throw Error("--loss-budget and --trial-steps only apply with --search");
    if (search) {
      if (!loss_budget) throw Error("--search needs --loss-budget (e.g. 0.01 for 1%)");
      if (!fractions.empty() || !o.extra_policies.empty())
        throw Error("--fractions and --policy choose the fixed recipes; --search chooses its own");
      o.loss_budget = *loss_budget;
    }
    if (!fractions.empty()) {
      o.fractions.clear();
      for (const std::string& f : listItems("--fractions", fractions))
        o.fractions.push_back(parseNumber(ranges::kFraction, f));
    }
    if (!metric.empty()) o.metric = metricFromName(metric, "--metric");
    o.profile_metrics = !no_profile_metrics;
    if (o.scheme != Scheme::kInt8 && (cmd->count("--bits") || cmd->count("--granularity")))
      throw Error(fmt::format("--bits and --granularity shape the int8 scheme; --scheme {} has its own formats",
                              o.scheme));
    finishOrderingsOptions(cmd, o, orderings);
    ExperimentResult r = runExperiment(o);
    fmt::print("report: {}\n", r.report_path);
    if (!r.table_path.empty()) fmt::print("table: {}\n", r.table_path);
  });
}

}  // namespace pgq::cli
