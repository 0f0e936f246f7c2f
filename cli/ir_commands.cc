// `pgq ir print | opt | model | demo`: read, transform and write the IR text form.
#include <algorithm>
#include <cstdio>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/compile.h"
#include "passes/pipeline.h"
#include "passes/registry.h"
#include "passes/training_pipeline.h"
#include "plan/hardware.h"
#include "plan/recipe.h"
#include "runtime/trainer.h"

namespace pgq::cli {
namespace {

// The embedded example of `pgq ir demo`: a two-layer MLP whose hidden activation is
// computed twice (the same matmul and gelu), as a frontend that does not share
// values might emit it. `cse` merges the copies and `dce` drops what is left dead.
constexpr const char* kDemoGraph = R"pgq(graph @mlp_demo {
  %x = input() : f32[8,16]
  %w1 = parameter() {init="normal(0.02)"} : f32[16,32]
  %w2 = parameter() {init="normal(0.02)"} : f32[32,16]
  %h = matmul(%x, %w1) {lhs_contract=[1], rhs_contract=[0], label="mlp/up"} : f32[8,32]
  %a = gelu(%h) : f32[8,32]
  %h_again = matmul(%x, %w1) {lhs_contract=[1], rhs_contract=[0], label="mlp/up"} : f32[8,32]
  %a_again = gelu(%h_again) : f32[8,32]
  %sum = add(%a, %a_again) : f32[8,32]
  %y = matmul(%sum, %w2) {lhs_contract=[1], rhs_contract=[0], label="mlp/down"} : f32[8,16]
  %unused = exp(%y) : f32[8,16]
  return %y
}
)pgq";

void runPipeline(Graph& graph, const std::string& passes) {
  PassContext ctx;
  parsePipeline(passes)->run(graph, ctx);
}

// Every registered pass with its options, for `pgq ir opt --help`.
std::string passList() {
  std::vector<PassHelp> passes = passHelp();
  size_t width = 0;
  for (const PassHelp& pass : passes)
    for (const OptionHelp& option : pass.options) width = std::max(width, option.key.size() + 1 + option.syntax.size());
  std::string text = "Passes (--passes 'name,name{key=value,...}', e.g. 'tag_metadata,quantize_gemms{recipe=r.yaml}'):\n";
  for (const PassHelp& pass : passes) {
    text += fmt::format("  {:<18} {}\n", pass.name, pass.summary);
    for (const OptionHelp& option : pass.options)
      text += fmt::format("      {:<{}}  {} ({})\n", option.key + "=" + option.syntax, width, option.help,
                          option.required ? "required" : "default " + option.default_value);
  }
  text += fmt::format("Formats: int<bits>:<tensor|channel|block<N>>:<rtn|sr>[:asym][:clip=...]; hardware presets: {}\n",
                      fmt::join(hardwarePresetNames(), ", "));
  return text;
}

}  // namespace

void addIrCommands(CLI::App& app) {
  CLI::App* ir = app.add_subcommand("ir", "Read, transform and print IR text (.pgq files)");
  ir->require_subcommand(1);

  auto* print = ir->add_subcommand("print", "Parse and verify an IR file, print it back");
  static std::string print_file;
  print->add_option("FILE", print_file, "IR text file, or - for standard input")->required();
  print->callback([] {
    auto graph = parseGraphFile(print_file);
    verify(*graph);
    fmt::print("{}", printGraph(*graph));
  });

  auto* opt = ir->add_subcommand("opt", "Run a pass pipeline on an IR file and print the result");
  static std::string opt_file;
  static std::string opt_passes;
  opt->add_option("FILE", opt_file, "IR text file, or - for standard input")->required();
  opt->add_option("--passes", opt_passes, "Comma-separated passes with options in braces, e.g. cse,dce")->required();
  opt->footer(passList());
  opt->callback([] {
    auto pipeline = parsePipeline(opt_passes);  // a bad pass or option fails before the graph is read
    auto graph = parseGraphFile(opt_file);
    PassContext ctx;
    pipeline->run(*graph, ctx);
    fmt::print("{}", printGraph(*graph));
  });

  auto* model = ir->add_subcommand("model", "Print the training graph (forward + backward) of a model config");
  static ModelFlags model_spec{"tiny", {}};
  static bool forward_only = false;
  static bool compile = false;
  static std::string model_precision = "f32";
  static bool model_profile = false;
  static std::string model_hardware;
  static std::string model_recipe;
  addModelFlags(model, model_spec);
  model->add_flag("--forward-only", forward_only, "Print the forward graph only");
  auto* compile_flag = model->add_flag(
      "--compile", compile,
      "Run the training pipeline pgq train runs (cse, dce, tag_metadata and what the flags below add)");
  model->add_option("--precision", model_precision, "With --compile: GEMM precision, f32 or bf16 (adds bf16_gemms)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str()
      ->needs(compile_flag);
  model->add_flag("--profile", model_profile, "With --compile: add stage (i)'s statistics nodes (instrument_stats)")
      ->needs(compile_flag);
  model->add_option("--hardware", model_hardware,
                    "With --compile: annotate roofline estimates on this hardware model (estimate_speedup)")
      ->needs(compile_flag);
  model->add_option("--recipe", model_recipe, "With --compile: rewrite the GEMMs this recipe chooses (quantize_gemms)")
      ->needs(compile_flag);
  model->callback([] {
    TrainOptions o;
    o.model = loadModel(model_spec);
    o.precision = model_precision == "bf16" ? Precision::kBf16 : Precision::kF32;
    // Read both files before building anything, so a bad one fails first.
    std::optional<HardwareModel> hardware;
    std::optional<Recipe> recipe;
    if (!model_hardware.empty()) hardware = loadHardwareModel(model_hardware);
    if (!model_recipe.empty()) recipe = loadRecipe(model_recipe);
    // Printed, never run: what the trainer compiles, or (without --compile) what
    // autodiff makes of the forward the trainer runs.
    std::optional<TrainingPipelineOptions> pipeline;
    if (compile)
      pipeline = trainingPipelineOptions(o, model_profile, recipe ? &*recipe : nullptr, hardware ? &*hardware : nullptr);
    TransformerGraph t = compileModel(o.model, {.backward = !forward_only, .pipeline = pipeline});
    verify(*t.graph);
    fmt::print("{}", printGraph(*t.graph));
  });

  auto* demo = ir->add_subcommand("demo", "Print an embedded example graph, run cse,dce on it, print the result");
  demo->callback([] {
    auto graph = parseGraph(kDemoGraph, "<demo>");
    fmt::print("# input graph\n{}\n", printGraph(*graph));
    size_t before = graph->size();
    runPipeline(*graph, "cse,dce");
    fmt::print("# after cse,dce ({} -> {} nodes)\n{}", before, graph->size(), printGraph(*graph));
  });
}

}  // namespace pgq::cli
