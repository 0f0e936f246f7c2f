// `pgq recipe`: stage (ii), from a profile to a recipe with a reason per GEMM.
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/number_flags.h"
#include "frontend/model_config.h"
#include "plan/gemm_metric.h"
#include "plan/hardware.h"
#include "plan/policy.h"
#include "plan/profile.h"
#include "plan/recipe_export.h"
#include "plan/recipe_generator.h"
#include "plan/trainer_export.h"
#include "support/errors.h"
#include "support/file_io.h"

namespace pgq::cli {
namespace {

// Checked before any work, so that a mistyped path costs no recipe generation.
void checkExportPath(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path file(path);
  fs::path dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(fmt::format("--export-torch {}: directory '{}' does not exist; create it first", path, dir.string()));
  if (file.filename().empty() || fs::is_directory(file, ec))
    throw Error(fmt::format("--export-torch {}: is a directory; give a file such as {}", path,
                            (dir / "recipe.json").string()));
  std::string filter;
  try {
    filter = torchFilterPath(path);  // refuses a JSON path the filter would overwrite
  } catch (const Error& e) {
    throw Error(fmt::format("--export-torch {}", e.what()));
  }
  checkFileWithSidecar("--export-torch", path, filter);
}

// The text `make` returns, its errors prefixed with `flag`: an export's refusal ("recipe
// i8:0: ...") names the flag that asked for it.
template <typename Make>
std::string withFlag(const char* flag, Make make) {
  try {
    return make();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", flag, e.what()));
  }
}

}  // namespace

void addRecipeCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("recipe", "Decide which GEMMs run in int8, from a profile, a hardware model and a policy");
  static std::string profile, hardware, policy, out;
  static bool explain = false;
  static double token_scale = 1.0;
  cmd->add_option("--profile", profile, "Profile written by pgq train --profile-out")->required();
  cmd->add_option("--hardware", hardware,
                  fmt::format("Hardware model: a preset ({}) or a YAML file (pgq hwprobe writes one)",
                              fmt::join(hardwarePresetNames(), ", ")))
      ->required();
  cmd->add_option("--policy", policy, "F, F+B, F+B_SR, F+B_SR>T, F+B_SR<T, F>T1+B_SR>T2, or a policy YAML file")
      ->required();
  cmd->add_option("-o,--out", out, "Recipe to write (YAML); printed to standard output when absent")
      ->check(kNonEmptyPath);
  static std::string model;
  static ModelOverrides sizes;
  cmd->add_option("--model", model, "Check that the profile was made with this model (preset, YAML or ONNX file)");
  cmd->add_option("--batch", sizes.batch, "With --model: its batch size (sizes a dynamic ONNX dim), as profiled")
      ->check(CLI::Range(int64_t{1}, kMaxModelSize));
  cmd->add_option("--seq", sizes.seq_len, "With --model: its sequence length (sizes a dynamic ONNX dim), as profiled")
      ->check(CLI::Range(int64_t{2}, kMaxModelSize));
  addNumber(cmd, ranges::kTokenScale, token_scale,
            "The target run processes this many times the profiled run's tokens per device (e.g. 8 for batch 64 "
            "profiled at batch 8): the roofline sees GEMMs that large; SQNR stays as profiled");
  static std::string export_torch;
  cmd->add_option("--export-torch", export_torch,
                  "Also write the recipe for PyTorch: FILE.json (the nn.Linear modules to quantize with Transformer "
                  "Engine or torchao) and FILE.py beside it (torchao's module_filter_fn)")
      ->check(kNonEmptyPath);
  static std::string export_megatron;
  cmd->add_option("--export-megatron", export_megatron,
                  "Also write the recipe for Megatron-LM: FILE.yaml (its --te-precision-config-file, a Transformer "
                  "Engine recipe per module) and FILE.py beside it (Transformer Engine CustomRecipe quantizer "
                  "factories, per module and tensor role); needs a model pgq built")
      ->check(kNonEmptyPath);
  static std::string metric;
  cmd->add_option("--metric", metric,
                  fmt::format("What the policy's thresholds compare, per GEMM: {} (pgq sqnr-table shows each; "
                              "docs/METRICS.md). Overrides the policy file's `metric:`. Default: {} when the profile "
                              "has its statistics (pgq train --profile-metrics --profile-outputs), else sqnr",
                              metricNames(), nameOf(kDefaultMetric)));
  cmd->add_flag("--explain", explain, "Print a summary: GEMMs quantized per direction, why others were kept, speedup");
  cmd->callback([cmd] {
    std::optional<Metric> chosen;
    if (cmd->count("--metric")) chosen = metricFromName(metric, "--metric");
    if (model.empty() && (sizes.batch || sizes.seq_len)) throw Error("--batch and --seq size the --model: give it too");
    // Every output, sidecars included, decided and checked before any work: none may be
    // another or a file this command reads.
    OutputPlan plan;
    for (const std::string* input : {&profile, &hardware, &policy, &model}) plan.reads(*input);
    if (!out.empty()) plan.writes("-o", out);
    std::string torch_filter, megatron_factories;
    if (!export_torch.empty()) {
      checkExportPath(export_torch);
      torch_filter = torchFilterPath(export_torch);
      plan.writesWithSidecar("--export-torch", export_torch, torch_filter);
    }
    if (!export_megatron.empty()) {
      megatron_factories = megatronFactoryPath(export_megatron);
      plan.writesWithSidecar("--export-megatron", export_megatron, megatron_factories);
    }
    plan.check();
    Profile p = loadProfile(profile);
    if (!model.empty()) {
      ModelConfig m = loadModelConfig(model, sizes);
      checkProfileModel(p, m.name, m.toYaml(), m.source);
    }
    HardwareModel hw = loadHardwareModel(hardware);
    Policy pol = loadPolicy(policy);
    if (chosen) pol.metric = *chosen;
    if (pol.metric) requireMetric(p, *pol.metric, profile);
    Recipe recipe = generateRecipe(scaleTokens(p, token_scale), hw, pol, profile);
    // Every text before any file: an export that refuses the recipe writes nothing.
    std::vector<std::pair<std::string, std::string>> files;  // path, text
    if (!out.empty()) files.emplace_back(out, recipeToYaml(recipe));
    if (!export_torch.empty()) {
      files.emplace_back(export_torch, withFlag("--export-torch", [&] { return recipeToTorchJson(recipe); }));
      files.emplace_back(torch_filter, withFlag("--export-torch", [&] { return recipeToTorchFilter(recipe); }));
    }
    if (!export_megatron.empty()) {
      const std::string module = std::filesystem::path(export_megatron).stem().string();
      files.emplace_back(export_megatron, withFlag("--export-megatron", [&] {
                           return recipeToMegatronConfig(recipe, module);
                         }));
      files.emplace_back(megatron_factories,
                         withFlag("--export-megatron", [&] { return recipeToTeFactories(recipe); }));
    }
    if (out.empty()) fmt::print("{}", recipeToYaml(recipe));
    writeFilesTogether(files);
    if (!out.empty()) fmt::print(stderr, "recipe: {}\n", out);
    if (!export_torch.empty()) fmt::print(stderr, "PyTorch export: {} and {}\n", export_torch, torch_filter);
    if (!export_megatron.empty())
      fmt::print(stderr, "Megatron-LM export: {} and {}\n", export_megatron, megatron_factories);
    if (explain) fmt::print(out.empty() ? stderr : stdout, "{}", explainRecipe(recipe));
  });
}

}  // namespace pgq::cli
