#include "passes/pipeline.h"

#include <spdlog/spdlog.h>

#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pass_options.h"
#include "passes/registry.h"
#include "support/errors.h"

namespace pgq {

bool Pipeline::run(Graph& graph, PassContext& ctx) {
  if (ctx.verify) verify(graph);
  bool any_change = false;
  for (const auto& pass : passes_) {
    // In verifying mode the text before the pass tells whether a pass that reported
    // "no change" kept its word.
    std::string before = ctx.verify ? printGraph(graph) : std::string();
    bool changed = pass->run(graph, ctx);
    spdlog::debug("pass {}: {}", pass->name(), changed ? "changed" : "no change");
    if (changed) {
      if (ctx.verify) verify(graph);
      if (spdlog::should_log(spdlog::level::trace))
        spdlog::trace("IR after {}:\n{}", pass->name(), printGraph(graph));
    } else if (ctx.verify && printGraph(graph) != before) {
      throw InternalError(fmt::format("pass {} changed the graph but reported no change",
                                      pass->name()));
    }
    any_change |= changed;
  }
  return any_change;
}

std::vector<std::string_view> Pipeline::passNames() const {
  std::vector<std::string_view> names;
  for (const auto& pass : passes_) names.push_back(pass->name());
  return names;
}

std::unique_ptr<Pipeline> parsePipeline(std::string_view spec) {
  auto pipeline = std::make_unique<Pipeline>();
  for (std::string_view pass : splitOutsideBrackets(spec, "pipeline")) {
    if (pass.empty()) throw Error(fmt::format("empty pass name in pipeline '{}'", spec));
    pipeline->add(createPass(pass));
  }
  return pipeline;
}

}  // namespace pgq
