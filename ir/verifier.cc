#include "ir/verifier.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "ir/infer.h"
#include "support/errors.h"

namespace pgq {

bool isValidName(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == '/';
  });
}

void verify(const Graph& graph) {
  auto fail = [&](const Node& node, const std::string& what) {
    throw Error(fmt::format("verifier: graph @{}: %{} ({}): {}", graph.name(), node.name(),
                            opName(node.op()), what));
  };
  // The graph's nodes by id, so that whether an operand, a user or an output belongs to
  // the graph is one array look-up (this runs after every pass, on every node).
  const std::vector<Node*> nodes = graph.nodes();
  int64_t max_id = -1;
  for (const Node* node : nodes) max_id = std::max(max_id, node->id());
  std::vector<const Node*> by_id(static_cast<size_t>(max_id + 1), nullptr);
  for (const Node* node : nodes) by_id[static_cast<size_t>(node->id())] = node;
  auto inGraph = [&](const Node* node) {
    return node != nullptr && node->id() >= 0 && node->id() <= max_id &&
           by_id[static_cast<size_t>(node->id())] == node;
  };
  std::vector<TensorType> operand_types;
  size_t operand_uses = 0;
  for (const Node* node : nodes) {
    if (!isValidName(node->name())) fail(*node, "invalid name");
    if (graph.find(node->name()) != node) fail(*node, "name is not registered with the graph");
    operand_types.clear();
    for (const Node* operand : node->operands()) {
      if (!inGraph(operand)) fail(*node, "has an operand that is not in the graph");
      operand_types.push_back(operand->type());
    }
    operand_uses += operand_types.size();
    std::optional<TensorType> declared;
    if (opTypeRule(node->op()) == TypeRule::kDeclared) declared = node->type();
    TensorType inferred;
    try {
      inferred = inferType(node->op(), operand_types, node->attrs(), declared);
    } catch (const Error& e) {
      fail(*node, e.what());
    }
    if (!(inferred == node->type()))
      fail(*node, fmt::format("type is {} but its operands give {}", node->type().toString(),
                              inferred.toString()));
  }
  // Every use recorded on the operand side must match one on the user side: a node's
  // users are exactly the nodes that name it as an operand, as many times. The operand
  // side is grouped by node in arrays (a counting sort by id) and each group compared
  // sorted with the use list: no tree node allocated per edge, as a map of edges did.
  std::vector<size_t> begin(by_id.size() + 1, 0);
  for (const Node* node : nodes)
    for (const Node* operand : node->operands()) ++begin[static_cast<size_t>(operand->id()) + 1];
  std::partial_sum(begin.begin(), begin.end(), begin.begin());
  std::vector<const Node*> named_by(operand_uses);
  std::vector<size_t> next(begin.begin(), begin.end() - 1);
  for (const Node* node : nodes)
    for (const Node* operand : node->operands()) named_by[next[static_cast<size_t>(operand->id())]++] = node;
  std::vector<const Node*> users;
  for (const Node* node : nodes) {
    users.assign(node->users().begin(), node->users().end());
    auto first = named_by.begin() + static_cast<std::ptrdiff_t>(begin[static_cast<size_t>(node->id())]);
    auto last = named_by.begin() + static_cast<std::ptrdiff_t>(begin[static_cast<size_t>(node->id()) + 1]);
    std::sort(users.begin(), users.end());
    std::sort(first, last);
    if (!std::equal(users.begin(), users.end(), first, last))
      fail(*node, "its use list disagrees with the operands of its users");
  }
  for (const Node* output : graph.outputs())
    if (!inGraph(output))
      throw Error(fmt::format("verifier: graph @{}: an output is not in the graph", graph.name()));
  graph.postOrder();  // throws on a cycle
}

}  // namespace pgq
