#include "passes/compile.h"

#include <string>
#include <vector>

#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "support/errors.h"

namespace pgq {
namespace {

// Runs the training pipeline on `t`'s graph. partition_spmd replaces every node, so the
// handles are found again by name (parameters and inputs keep theirs).
void runTrainingPipeline(TransformerGraph& t, const TrainingPipelineOptions& options) {
  std::vector<std::string> params, constants;
  for (const Node* n : t.params) params.push_back(n->name());
  for (const Node* n : t.constants) constants.push_back(n->name());
  const std::string tokens = t.tokens ? t.tokens->name() : std::string();
  const std::string targets = t.targets ? t.targets->name() : std::string();
  PassContext ctx;
  buildTrainingPipeline(options)->run(*t.graph, ctx);
  auto find = [&](const std::string& name) {
    Node* n = t.graph->find(name);
    PGQ_ASSERT(n != nullptr, "%{} is gone after the training pipeline", name);
    return n;
  };
  for (size_t i = 0; i < params.size(); ++i) t.params[i] = find(params[i]);
  for (size_t i = 0; i < constants.size(); ++i) t.constants[i] = find(constants[i]);
  if (!tokens.empty()) t.tokens = find(tokens);
  if (!targets.empty()) t.targets = find(targets);
  t.loss = t.graph->outputs()[0];
}

}  // namespace

void compile(TransformerGraph& t, const CompileOptions& options) {
  PassContext ctx;
  buildForwardPipeline()->run(*t.graph, ctx);
  if (options.backward) appendBackward(*t.graph, t.loss, t.params);
  if (options.pipeline) runTrainingPipeline(t, *options.pipeline);
}

TransformerGraph compileModel(const ModelConfig& config, const CompileOptions& options) {
  TransformerGraph t = buildModel(config, options.initial_values);
  compile(t, options);
  return t;
}

}  // namespace pgq
