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

// True for a statistics node (quant_stats, error_stats): it measures values and feeds
// nothing but the graph's outputs.
bool isStatistics(const Node& node);

// True when `node` is computed only to be measured: not an output of the graph, and
// read by statistics nodes only (and at least one). Stage (i)'s quantized copy of a
// GEMM, compared with the GEMM by error_stats, is one: no GEMM of the model, so tag
// readers (tag_metadata, estimate_speedup, recipes) pass it by.
bool isMeasuredOnly(const Graph& graph, const Node& node);

}  // namespace pgq
