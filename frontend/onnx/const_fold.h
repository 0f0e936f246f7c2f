#pragma once
// Constant folding at ONNX import: the shape arithmetic exporters emit (Shape, Gather,
// Concat, Reshape...), rotary tables computed from inv_freq, causal masks, evaluated
// once so that the importer sees constants instead of graphs of small ops.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "frontend/onnx/onnx_model.h"

namespace pgq {

// The most elements a folded result may have (2^26: 512 MiB of doubles).
inline constexpr int64_t kMaxFoldedElements = int64_t{1} << 26;

// Evaluates `node` of the default domain at `opset` on the constants `inputs` (one per
// node input; nullptr for an absent optional input), with ONNX's semantics: numpy
// broadcasting, the result dtypes of the operator and, for FLOAT results, every element
// rounded to float32 after each operator, as a float32 runtime would compute it.
// Returns one tensor per node output, or nullopt when the op is not one it folds (and
// for a Constant whose value is external data: read it with attributeTensor).
// Throws pgq::Error naming the node (and `model_file` when given) for invalid
// attributes or inputs and for a result of more than kMaxFoldedElements elements.
std::optional<std::vector<ConstTensor>> foldNode(const onnx::NodeProto& node,
                                                 std::span<const ConstTensor* const> inputs, int64_t opset,
                                                 const std::string& model_file = "");

// The op types foldNode folds (some only at some opsets or for some inputs).
const std::vector<std::string>& foldableOps();

}  // namespace pgq
