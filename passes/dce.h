#pragma once
// Dead-code elimination. Matches: every node that no graph output depends on, except
// parameters and inputs (the graph's interface). Rewrites: removes them. Reports a
// change when at least one node was removed.
#include "passes/pass.h"

namespace pgq {

class DeadCodeElimination : public Pass {
 public:
  std::string_view name() const override { return "dce"; }
  bool run(Graph& graph, PassContext& ctx) override;
};

}  // namespace pgq
