#pragma once
// Small questions about values that several passes ask.
#include "ir/node.h"

namespace pgq {

// True when `node` is a parameter, possibly seen through layout ops or a convert.
bool isWeightValue(const Node* node);

}  // namespace pgq
