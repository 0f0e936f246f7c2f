#pragma once
// The compile sequence, written once. Every graph pgq runs, prints or estimates comes
// from here:
//
//   model config --buildModel--> forward graph (built, or imported once per process)
//     --forward pipeline--> [--appendBackward-->] [--training pipeline-->] graph,
//   then the handles (parameters, constants, tokens, targets, loss) are found again by
//   name: partition_spmd replaces every node when the model is split.
//
// A training graph appends the backward; an evaluation graph runs the same training
// pipeline on the forward graph (the loss only); `pgq ir model` may stop before the
// training pipeline to print what autodiff made.
#include <optional>

#include "frontend/model_config.h"
#include "frontend/model_graph.h"
#include "passes/training_pipeline.h"

namespace pgq {

struct CompileOptions {
  // Append the backward (a training graph); false: the forward and its loss only.
  bool backward = true;
  // The training pipeline to run; none: stop after autodiff (nothing rewritten).
  std::optional<TrainingPipelineOptions> pipeline = TrainingPipelineOptions{};
  // An imported model's graph also carries its parameters' initial values
  // (buildModel's `initial_values`).
  bool initial_values = false;
};

// Compiles the forward graph `t` (from buildModel or an importer) in place.
void compile(TransformerGraph& t, const CompileOptions& options);

// buildModel(config) compiled with `options`.
TransformerGraph compileModel(const ModelConfig& config, const CompileOptions& options);

}  // namespace pgq
