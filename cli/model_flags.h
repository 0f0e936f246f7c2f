#pragma once
// --model and the flags that go with it, the same in every command that takes a model:
// a preset, a model YAML file or an ONNX file, with --batch/--seq (any model) and
// --trainable/--frozen (imported models).
#include <string>

#include <CLI/CLI.hpp>

#include "frontend/model_config.h"

namespace pgq::cli {

struct ModelFlags {
  std::string spec;
  ModelOverrides overrides;
};

void addModelFlags(CLI::App* cmd, ModelFlags& flags);
inline ModelConfig loadModel(const ModelFlags& flags) { return loadModelConfig(flags.spec, flags.overrides); }

}  // namespace pgq::cli
