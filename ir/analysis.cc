#include "ir/analysis.h"

#include <algorithm>

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

bool isStatistics(const Node& node) { return node.op() == Op::kQuantStats || node.op() == Op::kErrorStats; }

bool isMeasuredOnly(const Graph& graph, const Node& node) {
  if (node.users().empty()) return false;
  for (const Node* user : node.users())
    if (!isStatistics(*user)) return false;
  std::span<Node* const> outputs = graph.outputs();
  return std::find(outputs.begin(), outputs.end(), &node) == outputs.end();
}

}  // namespace pgq
