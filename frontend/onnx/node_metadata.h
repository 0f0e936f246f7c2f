#pragma once
// What torch.onnx.export (the torch.export-based exporter, PyTorch >= 2.5) records on each
// node: `metadata_props` entries naming the module the node came from. pgq uses them to
// name GEMMs after the user's modules and initializers after the parameters they hold.
//
// NodeProto.metadata_props (field 9) is newer than the ONNX 1.12 protobuf classes pgq
// builds against; protobuf keeps it as an unknown field, which is where it is read from.
#include <map>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace pgq {

struct TorchNodeInfo {
  // pkg.torch.onnx.name_scopes without the root "": ["model", "model.layers.0", ...,
  // "model.layers.0.self_attn.q_proj", "linear"]: module paths, then the FX node's name.
  std::vector<std::string> scopes;
  // The aten target of the FX node ("aten.linear.default"); empty when not recorded.
  std::string target;
  // The FX node's arguments that are parameters, in order: "p_model_layers_0_q_proj_weight"
  // (torch.export's placeholder names: the parameter's dotted name with '.' as '_').
  std::vector<std::string> param_args;
  // Every positional argument as written ("%mul_3", "%p_model_norm_weight", "2", ...).
  std::vector<std::string> args;

  bool empty() const { return scopes.empty() && target.empty(); }
  // The module the node belongs to: the innermost scope before the FX node's own name
  // ("model.layers.0.self_attn.q_proj"); empty for the root module.
  std::string modulePath() const;
  // The FX node's name (the last scope): "linear", "scaled_dot_product_attention_1".
  std::string fxName() const;
};

// The metadata_props of `node` (empty when it has none).
std::map<std::string, std::string> nodeMetadataProps(const onnx::NodeProto& node);

// The exporter's record for `node`; empty when the node carries none (older exporters,
// nodes the optimizer made).
TorchNodeInfo torchNodeInfo(const onnx::NodeProto& node);

// "p_" followed by `dotted` with '.' written '_': torch.export's placeholder name.
std::string torchPlaceholderName(const std::string& dotted);

}  // namespace pgq
