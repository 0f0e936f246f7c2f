#include "ir/analysis.h"

namespace pgq {

bool isWeightValue(const Node* node) {
  while (node->op() == Op::kTranspose || node->op() == Op::kReshape || node->op() == Op::kConvert)
    node = node->operand(0);
  return node->op() == Op::kParameter;
}

}  // namespace pgq
