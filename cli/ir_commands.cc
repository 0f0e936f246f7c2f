// `pgq ir print | opt | demo`: read, transform and write the IR text form.
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pipeline.h"
#include "passes/registry.h"

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
  opt->add_option("--passes", opt_passes, "Comma-separated pass names, e.g. cse,dce")->required();
  opt->callback([] {
    auto pipeline = parsePipeline(opt_passes);  // a bad pass name fails before any I/O
    auto graph = parseGraphFile(opt_file);
    PassContext ctx;
    pipeline->run(*graph, ctx);
    fmt::print("{}", printGraph(*graph));
  });

  auto* model = ir->add_subcommand("model", "Print the training graph (forward + backward) of a model config");
  static std::string model_spec = "tiny";
  static bool forward_only = false;
  model->add_option("--model", model_spec, "Preset name (tiny, small) or model YAML file")
      ->capture_default_str();
  model->add_flag("--forward-only", forward_only, "Print the forward graph only");
  model->callback([] {
    TransformerGraph t = buildTransformer(loadModelConfig(model_spec));
    if (!forward_only) appendBackward(*t.graph, t.loss, t.params);
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
