#pragma once
// What the fusion passes (fuse_decomposed, fuse_softmax, fuse_swiglu) share: splat
// constants, whether a pattern may absorb a value, and the fused node's name.
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace pgq::fusion {

inline bool isOutput(const Graph& graph, const Node* n) {
  return std::find(graph.outputs().begin(), graph.outputs().end(), n) != graph.outputs().end();
}

// The value of a splat: a constant, or a reshape or broadcast of one.
inline std::optional<double> splatValue(const Node* n) {
  while (n->op() == Op::kReshape || n->op() == Op::kBroadcast) n = n->operand(0);
  if (n->op() != Op::kConstant || !n->attrs().has(AttrKey::kValue)) return std::nullopt;
  return n->attrs().getFloat(AttrKey::kValue);
}

// `n` feeds only `user` and is not a graph output: a fused node may absorb it.
inline bool ownedBy(const Graph& graph, const Node* n, const Node* user) {
  return !isOutput(graph, n) &&
         std::all_of(n->users().begin(), n->users().end(), [&](const Node* u) { return u == user; });
}

// A dead value (no users, not an output): left for dce, not fused.
inline bool isDead(const Graph& graph, const Node* n) { return n->users().empty() && !isOutput(graph, n); }

// "/blocks.0/mlp/Mul_3" -> "/blocks.0/mlp/gelu": the fused node stays in its pattern
// root's scope.
inline std::string fusedName(const Graph& graph, const Node* root, std::string_view op) {
  const std::string& name = root->name();
  const size_t slash = name.rfind('/');
  return graph.uniqueName((slash == std::string::npos ? "" : name.substr(0, slash + 1)) + std::string(op));
}

}  // namespace pgq::fusion
