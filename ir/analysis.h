#pragma once
// Small questions about values that several passes ask.
#include <unordered_set>

#include "ir/graph.h"
#include "ir/node.h"

namespace pgq {

// True when `node` is a parameter, possibly seen through layout ops or a convert.
bool isWeightValue(const Node* node);

// The nodes the graph's outputs depend on (the outputs included).
std::unordered_set<const Node*> liveNodes(const Graph& graph);

}  // namespace pgq
