#include "passes/cse.h"

#include <unordered_map>

namespace pgq {
namespace {

// Two nodes compute the same value when this key is equal.
struct ValueKey {
  const Node* node;

  bool operator==(const ValueKey& other) const {
    const Node& a = *node;
    const Node& b = *other.node;
    if (a.op() != b.op() || !(a.type() == b.type()) || a.numOperands() != b.numOperands())
      return false;
    for (int i = 0; i < a.numOperands(); ++i)
      if (a.operand(i) != b.operand(i)) return false;
    return a.attrs() == b.attrs();
  }
};

struct ValueKeyHash {
  size_t operator()(const ValueKey& key) const {
    size_t h = static_cast<size_t>(key.node->op()) * 0x9e3779b97f4a7c15ULL ^ key.node->attrs().hash();
    for (const Node* operand : key.node->operands())
      h = h * 31 + static_cast<size_t>(operand->id());
    return h;
  }
};

}  // namespace

bool CommonSubexpressionElimination::run(Graph& graph, PassContext&) {
  // Walk operands-first: when a node is visited its operands are already canonical,
  // so chains of duplicates collapse in one pass.
  std::unordered_map<ValueKey, Node*, ValueKeyHash> seen;
  bool changed = false;
  for (Node* node : graph.postOrder()) {
    if (node->op() == Op::kParameter || node->op() == Op::kInput) continue;
    auto [it, inserted] = seen.try_emplace(ValueKey{node}, node);
    if (inserted) continue;
    if (node->users().empty() && std::find(graph.outputs().begin(), graph.outputs().end(), node) ==
                                     graph.outputs().end())
      continue;
    graph.replaceAllUsesWith(node, it->second);
    changed = true;
  }
  return changed;
}

}  // namespace pgq
