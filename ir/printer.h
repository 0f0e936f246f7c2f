#pragma once
// The IR text form. Example:
//
//   graph @mlp {
//     %x = input() : f32[8,16]
//     %w = parameter() {init="normal(0.02)"} : f32[16,32]
//     %y = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="mlp/up"} : f32[8,32]
//     return %y
//   }
//
// Nodes are printed operands-first (Graph::postOrder), attributes in the order of
// attrs.def. Printing a parsed graph reproduces its text exactly.
#include <string>

#include "ir/graph.h"

namespace pgq {

std::string printGraph(const Graph& graph);
std::string printNode(const Node& node);  // one line, without indentation or newline

}  // namespace pgq
