#include "ir/analysis.h"

namespace pgq {

bool isWeightValue(const Node* node) {
  while (node->op() == Op::kTranspose || node->op() == Op::kReshape || node->op() == Op::kConvert)
    node = node->operand(0);
  return node->op() == Op::kParameter;
}

std::unordered_set<const Node*> liveNodes(const Graph& graph) {
  std::unordered_set<const Node*> live;
  std::vector<const Node*> work(graph.outputs().begin(), graph.outputs().end());
  while (!work.empty()) {
    const Node* node = work.back();
    work.pop_back();
    if (!live.insert(node).second) continue;
    for (const Node* operand : node->operands()) work.push_back(operand);
  }
  return live;
}

}  // namespace pgq
