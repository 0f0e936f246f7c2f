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
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
inline constexpr int kMaxFoldedElementsLog2 = 22;  // the same checks within libFuzzer's memory
#else
inline constexpr int kMaxFoldedElementsLog2 = 26;
#endif
inline constexpr int64_t kMaxFoldedElements = int64_t{1} << kMaxFoldedElementsLog2;

// Evaluates `node` of the default domain at `opset` on the constants `inputs` (one per
// node input; nullptr for an absent optional input), with ONNX's semantics: numpy
// broadcasting, the result dtypes of the operator and, for FLOAT results, every element
// rounded to float32 after each operator, as a float32 runtime would compute it.
// Returns one tensor per node output, or nullopt when the op is not one it folds (and
// for a Constant whose value is external data: read it with attributeTensor).
// Follows `opset` (pgq imports 13 to 23): an attribute the opset does not have yet
// (Split's num_outputs before 18, Cast's saturate before 19...), or an attribute the
// opset takes as an input instead (the reductions' axes from 18, ReduceSum's from 13,
// Split's split and Squeeze's and Unsqueeze's axes from 13), or that input given where
// the opset wants the attribute, is refused with a pgq::Error naming the node, op,
// opset and attribute.
// Throws pgq::Error naming the node (and `model_file` when given) for invalid
// attributes or inputs and for a result of more than kMaxFoldedElements elements.
std::optional<std::vector<ConstTensor>> foldNode(const onnx::NodeProto& node,
                                                 std::span<const ConstTensor* const> inputs, int64_t opset,
                                                 const std::string& model_file = "");

// The op types foldNode folds (some only for some inputs), sorted.
const std::vector<std::string>& foldableOps();

}  // namespace pgq
