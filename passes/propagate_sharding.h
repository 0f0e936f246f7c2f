#pragma once
// Tensor-parallel sharding propagation (GSPMD-style, forward through the dataflow).
// Matches: every value computed from a value annotated `split = [dim, devices]` (model
// builders annotate parameters the Megatron way). Rewrites: sets `split` on each value
// whose split follows from its operands':
//   transpose, reshape, broadcast, convert  move the split dim along with the data
//                                           (a reshape splits the outermost of the
//                                           dims a split dim becomes);
//   elementwise ops, quantize               keep it when every split operand of the
//                                           result's shape agrees;
//   softmax, normalizations, causal_mask,   keep it when they do not work across it
//   rope, reductions                        (renumbered past reduced dims);
//   gather, scatter_add                     keep a split of the feature dim;
//   matmul, qmatmul                         split the result dim an operand's split
//                                           free or batch dim becomes; a split
//                                           contracting dim leaves partial sums, and
//                                           the result is not split.
// Anything else, and operands that disagree, give no split. Sizes need not divide:
// a split says how work is laid out, and users of it (tag_metadata) check divisibility.
// A value that already has a `split` keeps it. Reports a change when it added any.
#include <cstdint>
#include <optional>

#include "passes/pass.h"

namespace pgq {

class PropagateSharding : public Pass {
 public:
  std::string_view name() const override { return "propagate_sharding"; }
  bool run(Graph& graph, PassContext& ctx) override;
};

// A value split along `dim` into `devices` parts.
struct ValueSplit {
  int64_t dim = 0;
  int64_t devices = 1;
  bool operator==(const ValueSplit& other) const = default;
};

// The `split` annotation of `node`, if any.
std::optional<ValueSplit> valueSplit(const Node& node);

}  // namespace pgq
