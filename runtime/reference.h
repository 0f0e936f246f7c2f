#pragma once
// The reference evaluator: the values of a graph computed in double precision by plain
// loops. It is slow and obvious on purpose, and shares no code with the fast kernels,
// so it can judge them (kernel and executor tests, gradient checks, numeric pass
// tests). Every op's exact meaning is written beside its rule in reference.cc.
//
// Values are doubles whatever the dtype: integer dtypes hold exact integers, and f32
// results are not rounded to f32 (only `convert` to bf16 rounds), so a fast f32 result
// is compared against the exact value with an error bound chosen by the test.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "runtime/tensor.h"

namespace pgq {

// A tensor of doubles, row-major like Tensor.
struct RefTensor {
  TensorType type;
  std::vector<double> data;
};

class ReferenceEvaluator {
 public:
  // The graph must outlive the evaluator.
  explicit ReferenceEvaluator(const Graph& graph);

  // Gives the value of a parameter or input. Throws pgq::Error when the node is not a
  // parameter or input of this graph, when the value's type differs from the node's,
  // when the data size does not match the shape, or when an integer tensor holds a
  // value that is not an integer of its dtype's range.
  void setInput(const Node* node, RefTensor value);
  void setInput(std::string_view name, RefTensor value);

  // Evaluates every node, operands first. Throws pgq::Error if a parameter or input has
  // no value, or on a data-dependent error (an index or target out of range), and
  // pgq::InternalError naming the op for an op it has no rule for (the quantizing ops:
  // quant_stats, quant_params, quantize, fake_quant, qmatmul).
  void run();

  // The value of a node or of graph output i after run(); pgq::Error before.
  const RefTensor& value(const Node* node) const;
  const RefTensor& output(size_t i) const;

 private:
  RefTensor evaluate(const Node& node) const;

  const Graph& graph_;
  std::unordered_map<const Node*, RefTensor> inputs_;
  std::unordered_map<const Node*, RefTensor> values_;
};

// Deterministic random values of `type` for tests (the same on every platform): float
// dtypes are normal(0, scale), bf16 ones rounded to bf16 precision; integer dtypes are
// uniform over their whole range (scale is ignored).
RefTensor randomRefTensor(const TensorType& type, uint64_t seed, double scale = 1.0);
// Uniform integers in [0, bound) of an integer dtype (gather indices, targets).
RefTensor randomIndices(const TensorType& type, int64_t bound, uint64_t seed);

// Between runtime tensors and reference values. toRefTensor is exact; toTensor rounds
// to nearest even for f32 and bf16 and throws pgq::Error for an integer tensor holding a
// value that is not an integer of its dtype's range.
RefTensor toRefTensor(const Tensor& tensor);
Tensor toTensor(const RefTensor& value);

}  // namespace pgq
