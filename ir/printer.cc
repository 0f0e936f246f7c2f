#include "ir/printer.h"

#include <iterator>

#include <fmt/format.h>

namespace pgq {
namespace {

// Appends pieces to one buffer: the pipeline prints whole graphs to check the passes
// that report no change, and a formatted string per piece made that a large share of
// compile time.
void appendNode(std::string& out, const Node& node) {
  out += '%';
  out += node.name();
  out += " = ";
  out += opName(node.op());
  out += '(';
  for (int i = 0; i < node.numOperands(); ++i) {
    if (i) out += ", ";
    out += '%';
    out += node.operand(i)->name();
  }
  out += ')';
  if (!node.attrs().empty()) {
    out += " {";
    bool first = true;
    for (const auto& [key, value] : node.attrs().entries()) {
      if (!first) out += ", ";
      out += attrName(key);
      out += '=';
      out += formatAttrValue(value);
      first = false;
    }
    out += '}';
  }
  out += " : ";
  out += dtypeName(node.dtype());
  out += '[';
  for (int i = 0; i < node.shape().rank(); ++i) {
    if (i) out += ',';
    fmt::format_to(std::back_inserter(out), "{}", node.shape().dim(i));
  }
  out += ']';
}

}  // namespace

std::string printNode(const Node& node) {
  std::string line;
  appendNode(line, node);
  return line;
}

std::string printGraph(const Graph& graph) {
  std::string out = fmt::format("graph @{} {{\n", graph.name());
  for (const Node* node : graph.postOrder()) {
    out += "  ";
    appendNode(out, *node);
    out += '\n';
  }
  out += "  return";
  for (size_t i = 0; i < graph.outputs().size(); ++i)
    fmt::format_to(std::back_inserter(out), "{}%{}", i ? ", " : " ", graph.outputs()[i]->name());
  return out + "\n}\n";
}

}  // namespace pgq
