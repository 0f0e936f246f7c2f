#include "passes/fuse_swiglu.h"

#include "passes/fusion_util.h"

namespace pgq {

bool FuseSwiglu::run(Graph& graph, PassContext&) {
  bool changed = false;
  for (Node* mul : graph.postOrder()) {
    if (mul->op() != Op::kMul || mul->dtype() != DType::kF32 || fusion::isDead(graph, mul)) continue;
    for (int side = 0; side < 2; ++side) {
      Node* silu = mul->operand(side);
      if (silu->op() != Op::kSilu || !fusion::ownedBy(graph, silu, mul)) continue;
      Node* fused = graph.create(Op::kSwiglu, {silu->operand(0), mul->operand(1 - side)}, {}, std::nullopt,
                                 fusion::fusedName(graph, mul, "swiglu"));
      graph.replaceAllUsesWith(mul, fused);
      changed = true;
      break;
    }
  }
  return changed;
}

}  // namespace pgq
