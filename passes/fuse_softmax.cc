#include "passes/fuse_softmax.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "passes/fusion_util.h"

namespace pgq {

using fusion::isDead;
using fusion::ownedBy;
using fusion::splatValue;

bool FuseSoftmax::run(Graph& graph, PassContext&) {
  bool changed = false;
  for (Node* softmax : graph.postOrder()) {
    if (softmax->op() != Op::kSoftmax || softmax->dtype() != DType::kF32) continue;
    if (isDead(graph, softmax)) continue;
    if (softmax->attrs().has(AttrKey::kScale) || softmax->attrs().has(AttrKey::kCausal)) continue;
    Attrs attrs;
    Node* x = softmax->operand(0);
    const Node* user = softmax;
    if (x->op() == Op::kCausalMask && ownedBy(graph, x, user)) {
      attrs.set(AttrKey::kCausal, x->attrs().getFloat(AttrKey::kValue));
      user = x;
      x = x->operand(0);
    }
    if (x->op() == Op::kMul && ownedBy(graph, x, user)) {
      for (int side = 0; side < 2; ++side) {
        const std::optional<double> c = splatValue(x->operand(side));
        // The kernels hold the scale in f32, as the constant is; 0 is not a scale (ops.def).
        const auto f = c ? static_cast<float>(*c) : 0.0f;
        if (!c || !std::isfinite(f) || f == 0.0f) continue;
        attrs.set(AttrKey::kScale, *c);
        x = x->operand(1 - side);
        break;
      }
    }
    if (x == softmax->operand(0)) continue;
    Node* fused =
        graph.create(Op::kSoftmax, {x}, std::move(attrs), std::nullopt, fusion::fusedName(graph, softmax, "softmax"));
    graph.replaceAllUsesWith(softmax, fused);
    changed = true;
  }
  return changed;
}

}  // namespace pgq
