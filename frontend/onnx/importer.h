#pragma once
// ONNX import: a model exported by torch.onnx.export (opsets 13 to 23: the
// TorchScript exporter of PyTorch <= 2.8 wrote 14-17, the torch.export-based one, the
// default since 2.9, writes 20, or 23 on request) becomes a pgq training graph, so that a
// user's own transformer is profiled, quantized and trained by the same passes as the
// built-in ones. Every op goes through one table (onnx_ops.def: opsets, attributes,
// differentiable inputs); `pgq import --list-ops` prints it.
//
// Shapes are static: batch and sequence length come from the model's input shapes or
// from the options, and every shape computation (Shape, Gather on shapes, Range,
// ConstantOfShape, Expand, Equal, Where on constants, Cast, ...) is folded at import.
// Initializers become parameters with their values (a pretrained or PyTorch-initialized
// model is fine-tuned, not re-initialized); which of them are trained is decided by
// the exporter's record on each node (PyTorch's parameters train, buffers and folded
// values do not), by a parameter list beside the model, or by the dataflow (see
// chooseTrainable in importer.cc). GEMMs are labelled with the user's module paths: the
// exporter's record `model.layers.0.self_attn.q_proj` gives that GEMM (layer 0); the old
// exporter's node `/blocks.0/attn/q/MatMul` gives `blocks.0/attn/q`.
//
// The loss: a scalar output (SoftmaxCrossEntropyLoss, or LogSoftmax followed by
// NegativeLogLikelihoodLoss, against a labels input), or, for a model that outputs
// logits [B, T, V], the mean cross-entropy of the logits at positions 0..T-2 against
// the tokens at 1..T-1 (what Hugging Face's causal LMs compute).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "frontend/model_graph.h"

namespace pgq {

struct OnnxImportOptions {
  std::string path;
  // Sizes of dynamic input dims (0: the model must give them). A model with static
  // dims refuses a different value: its reshapes were traced at that size.
  int64_t batch = 0;
  int64_t seq_len = 0;
  // RE2 patterns over initializer names, overriding the default choice of trainable
  // parameters: `frozen` wins over `trainable`.
  std::string trainable = {};
  std::string frozen = {};
  // Import the forward computation only: the graph's outputs are the model's outputs,
  // no loss is looked for and no input needs to be integer (single-op test models).
  bool forward_only = false;
};

struct ImportedModel {
  // graph, tokens (s32 [B, T]), targets (the labels input; null when the loss shifts
  // the tokens itself), loss, and the trainable parameters in initializer order.
  TransformerGraph net;
  // Frozen initializers and buffers the graph uses: parameters whose values come from
  // the model and are never trained.
  std::vector<Node*> constants;
  // Initial value of every parameter and constant, by IR name.
  std::map<std::string, std::vector<float>> values;
  // The ONNX initializer name of each trainable parameter, by IR name.
  std::map<std::string, std::string> onnx_names;
  // Graph inputs and (forward_only) outputs in the model's order: ONNX name and IR node.
  std::vector<std::pair<std::string, Node*>> inputs;
  std::vector<std::pair<std::string, Node*>> outputs;
  int64_t opset = 0;
  uint64_t fingerprint = 0;  // FNV-1a of the model file's bytes
  int64_t batch = 0;
  int64_t seq_len = 0;
  int64_t vocab = 0;
  // The loss's ignore_index, when it has one: pgq counts every label, so a label equal
  // to it would silently change the loss; label inputs are checked against it.
  std::optional<int64_t> ignore_index;
  // How the trainable parameters were chosen, and what import changed (dropout removed).
  std::vector<std::string> notes;
};

// Throws pgq::Error naming the file and the node for anything it cannot import: not an
// ONNX file, an unsupported op (with the list of supported ones), a dynamic dimension
// without a size, missing external data, no scalar loss and no logits output.
ImportedModel importOnnx(const OnnxImportOptions& options);

// The ONNX op types importOnnx understands (including those only folded).
std::vector<std::string> supportedOnnxOps();

// The op table as text: each op on IR values with its opsets, differentiable inputs and
// attributes, then the ops only folded (pgq import --list-ops).
std::string onnxOpTableText();

// Whether `spec` names an ONNX file (by its extension), for --model.
bool isOnnxModelPath(const std::string& spec);

}  // namespace pgq
