#pragma once
// Common-subexpression elimination. Matches: two nodes with the same op, the same
// operands (in order), equal attributes and the same result type. Parameters and
// inputs are never merged (each is a distinct value fed from outside); constants are
// (same value, same type). Rewrites: every use of the later node is pointed at the
// earlier one; the later node becomes dead and is left for `dce`. Reports a change
// when any use moved.
#include "passes/pass.h"

namespace pgq {

class CommonSubexpressionElimination : public Pass {
 public:
  std::string_view name() const override { return "cse"; }
  bool run(Graph& graph, PassContext& ctx) override;
};

}  // namespace pgq
