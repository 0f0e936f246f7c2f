#include "passes/fuse_softmax.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

namespace pgq {
namespace {

bool isOutput(const Graph& graph, const Node* n) {
  return std::find(graph.outputs().begin(), graph.outputs().end(), n) != graph.outputs().end();
}

// The value of a splat: a constant, or a reshape or broadcast of one.
std::optional<double> splatValue(const Node* n) {
  while (n->op() == Op::kReshape || n->op() == Op::kBroadcast) n = n->operand(0);
  if (n->op() != Op::kConstant || !n->attrs().has(AttrKey::kValue)) return std::nullopt;
  return n->attrs().getFloat(AttrKey::kValue);
}

// `n` feeds only `user` and is not a graph output: the fused node may absorb it.
bool ownedBy(const Graph& graph, const Node* n, const Node* user) {
  return !isOutput(graph, n) && std::all_of(n->users().begin(), n->users().end(),
                                            [&](const Node* u) { return u == user; });
}

// "layer0/attn/probs" -> "layer0/attn/softmax": the fused node stays in its scope.
std::string fusedName(const Graph& graph, const Node* softmax) {
  const std::string& root = softmax->name();
  const size_t slash = root.rfind('/');
  return graph.uniqueName((slash == std::string::npos ? "" : root.substr(0, slash + 1)) + "softmax");
}

}  // namespace

bool FuseSoftmax::run(Graph& graph, PassContext&) {
  bool changed = false;
  for (Node* softmax : graph.postOrder()) {
    if (softmax->op() != Op::kSoftmax || softmax->dtype() != DType::kF32) continue;
    if (softmax->users().empty() && !isOutput(graph, softmax)) continue;  // dead
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
    Node* fused = graph.create(Op::kSoftmax, {x}, std::move(attrs), std::nullopt, fusedName(graph, softmax));
    graph.replaceAllUsesWith(softmax, fused);
    changed = true;
  }
  return changed;
}

}  // namespace pgq
