#pragma once
// The IR's invariant checker. The pass pipeline runs it at the start and after every
// pass that changed the graph; it never changes anything (it takes a const graph).
#include "ir/graph.h"

namespace pgq {

// Throws pgq::Error describing the first broken invariant: a node whose stored type
// no longer follows from its operands and attributes, an attribute the op does not
// take, operand/user lists that disagree, an operand or output from another graph,
// a cycle, or a bad name.
void verify(const Graph& graph);

// True when `name` can be written in the text form: [A-Za-z0-9_./]+.
bool isValidName(std::string_view name);

}  // namespace pgq
