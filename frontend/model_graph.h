#pragma once
// A model's forward graph with the handles every later stage needs: what the built-in
// builder (frontend/transformer.h) and the ONNX importer (frontend/onnx/) both make, and
// what the compile driver (passes/compile.h) turns into a training graph. It depends on
// the IR only, so the importer, below the model builder, can make one.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace pgq {

struct TransformerGraph {
  std::unique_ptr<Graph> graph;
  Node* tokens = nullptr;   // input s32[B,T]
  Node* targets = nullptr;  // input s32[B,T]: tokens shifted by one
  Node* loss = nullptr;     // f32[] mean cross-entropy
  std::vector<Node*> params;  // in a stable order (the order of checkpoints)
  // Imported models only: parameters that are never trained (frozen initializers,
  // buffers), and the initial value of every parameter and constant by name (from the
  // model file; built models initialize from each parameter's `init`).
  std::vector<Node*> constants;
  std::shared_ptr<const std::map<std::string, std::vector<float>>> values;
};

}  // namespace pgq
