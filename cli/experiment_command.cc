// `pgq experiment`: the whole profile-guided loop with the paper's comparisons.
#include <omp.h>

#include <sstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "ir/errors.h"
#include "runtime/experiment.h"

namespace pgq::cli {

void addExperimentCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "experiment",
      "Train an f32 baseline, profile it, generate the standard recipes and fine-tune with each; write Table I, the "
      "loss curves, speedup vs loss and a report (or, with --search, find the fastest recipe within a loss budget)");
  static ExperimentOptions o;
  static std::string model = "small", preset = "quick", fractions;
  static int threads = 0;
  static int64_t baseline_steps = -1, finetune_steps = -1, profile_steps = -1, trial_steps = -1;
  static double loss_budget = -1, lr = -1;
  cmd->add_option("--preset", preset,
                  "quick: baseline 200 steps, 60 fine-tuning steps per recipe (a few minutes on 2 cores); "
                  "full: 1000 and 300")
      ->check(CLI::IsMember({"quick", "full"}))
      ->capture_default_str();
  cmd->add_option("--model", model, "Preset name or model YAML file")->capture_default_str();
  cmd->add_option("--corpus", o.corpus, "Text file or directory of text files")->capture_default_str();
  cmd->add_option("--out", o.out_dir, "Results folder (an interrupted experiment resumes there)")->capture_default_str();
  cmd->add_option("--hardware", o.hardware, "Hardware model for the recipes (preset or YAML)")->capture_default_str();
  cmd->add_option("--from-checkpoint", o.from_checkpoint, "Use this baseline checkpoint instead of training one");
  cmd->add_option("--baseline-steps", baseline_steps, "f32 steps before profiling");
  cmd->add_option("--profile-steps", profile_steps, "Steps of statistics logging (default 5)");
  cmd->add_option("--finetune-steps", finetune_steps, "Fine-tuning steps per recipe");
  cmd->add_option("--fractions", fractions,
                  "Comma-separated fractions of backward GEMMs for the SQNR and adversarial recipes (default 0.5,0.9)");
  cmd->add_option("--policy", o.extra_policies, "Also run these policies (names or YAML files); repeatable");
  cmd->add_option("--bits", o.bits, "Bits of the int8 formats of every recipe (7-bit side added where needed)")
      ->capture_default_str();
  cmd->add_option("--backward-rounding", o.backward_rounding,
                  "Gradient rounding of the thresholded recipes: sr (F+B_SR>t, <t) or rtn (F+B>t, <t)")
      ->check(CLI::IsMember({"sr", "rtn"}))
      ->capture_default_str();
  cmd->add_option("--granularity", o.granularity, "Scale granularity of every recipe: channel, tensor or block<N>")
      ->capture_default_str();
  cmd->add_option("--lr", lr, "Peak learning rate (default 1e-3)");
  cmd->add_option("--threads", threads, "OpenMP threads (0: OpenMP's default)")->capture_default_str();
  cmd->add_flag("--search", o.search, "Search the forward/backward SQNR thresholds instead of the fixed recipes");
  cmd->add_option("--loss-budget", loss_budget, "--search: allowed loss increase over f32, e.g. 0.01 for 1%");
  cmd->add_option("--trial-steps", trial_steps, "--search: fine-tuning steps per trial (default 60)");
  cmd->add_flag("!--no-progress", o.progress, "Do not draw progress bars");
  cmd->callback([] {
    if (threads < 0) throw Error(fmt::format("--threads must be >= 0, got {}", threads));
    if (threads > 0) omp_set_num_threads(threads);
    o.model = loadModelConfig(model);
    bool full = preset == "full";
    o.baseline_steps = full ? 1000 : 200;
    o.finetune_steps = full ? 300 : 60;
    if (!o.from_checkpoint.empty() && baseline_steps >= 0)
      throw Error("--from-checkpoint and --baseline-steps conflict: the checkpoint is the baseline");
    if (baseline_steps >= 0) o.baseline_steps = baseline_steps;
    if (finetune_steps >= 0) o.finetune_steps = finetune_steps;
    if (profile_steps >= 0) o.profile_steps = profile_steps;
    if (trial_steps >= 0) o.trial_steps = trial_steps;
    if (lr >= 0) o.optimizer.lr = lr;
    o.optimizer.warmup = std::min<int64_t>(100, std::max<int64_t>(1, o.baseline_steps / 5));
    if (!o.search && (loss_budget >= 0 || trial_steps >= 0))
      throw Error("--loss-budget and --trial-steps only apply with --search");
    if (o.search) {
      if (loss_budget < 0) throw Error("--search needs --loss-budget (e.g. 0.01 for 1%)");
      if (!fractions.empty() || !o.extra_policies.empty())
        throw Error("--fractions and --policy choose the fixed recipes; --search chooses its own");
      o.loss_budget = loss_budget;
      if (loss_budget <= 0) throw Error(fmt::format("--loss-budget must be > 0, got {}", loss_budget));
    }
    if (!fractions.empty()) {
      o.fractions.clear();
      std::stringstream in(fractions);
      for (std::string f; std::getline(in, f, ',');) {
        try {
          size_t used = 0;
          o.fractions.push_back(std::stod(f, &used));
          if (used != f.size()) throw std::invalid_argument(f);
        } catch (const std::exception&) {
          throw Error(fmt::format("--fractions: '{}' is not a number", f));
        }
      }
    }
    ExperimentResult r = runExperiment(o);
    fmt::print("report: {}\n", r.report_path);
    if (!r.table_path.empty()) fmt::print("table: {}\n", r.table_path);
  });
}

}  // namespace pgq::cli
