#include "ir/printer.h"

#include <fmt/format.h>

namespace pgq {

std::string printNode(const Node& node) {
  std::string line = fmt::format("%{} = {}(", node.name(), opName(node.op()));
  for (int i = 0; i < node.numOperands(); ++i)
    line += fmt::format("{}%{}", i ? ", " : "", node.operand(i)->name());
  line += ")";
  if (!node.attrs().empty()) {
    line += " {";
    bool first = true;
    for (const auto& [key, value] : node.attrs().entries()) {
      line += fmt::format("{}{}={}", first ? "" : ", ", attrName(key), formatAttrValue(value));
      first = false;
    }
    line += "}";
  }
  return line + " : " + node.type().toString();
}

std::string printGraph(const Graph& graph) {
  std::string out = fmt::format("graph @{} {{\n", graph.name());
  for (const Node* node : graph.postOrder()) out += "  " + printNode(*node) + "\n";
  out += "  return";
  for (size_t i = 0; i < graph.outputs().size(); ++i)
    out += fmt::format("{}%{}", i ? ", " : " ", graph.outputs()[i]->name());
  return out + "\n}\n";
}

}  // namespace pgq
