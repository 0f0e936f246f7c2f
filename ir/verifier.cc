#include "ir/verifier.h"

#include <algorithm>
#include <map>

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
  // Every use recorded on the operand side must match one on the user side.
  std::map<std::pair<const Node*, const Node*>, int> uses;
  for (const Node* node : graph.nodes()) {
    if (!isValidName(node->name())) fail(*node, "invalid name");
    if (graph.find(node->name()) != node) fail(*node, "name is not registered with the graph");
    std::vector<TensorType> operand_types;
    for (const Node* operand : node->operands()) {
      if (operand == nullptr || graph.find(operand->name()) != operand)
        fail(*node, "has an operand that is not in the graph");
      operand_types.push_back(operand->type());
      ++uses[{operand, node}];
    }
    for (const Node* user : node->users()) --uses[{node, user}];
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
  for (const auto& [edge, count] : uses)
    if (count != 0)
      fail(*edge.second, fmt::format("use list of %{} disagrees with its operands",
                                     edge.first->name()));
  for (const Node* output : graph.outputs())
    if (output == nullptr || graph.find(output->name()) != output)
      throw Error(fmt::format("verifier: graph @{}: an output is not in the graph", graph.name()));
  graph.postOrder();  // throws on a cycle
}

}  // namespace pgq
