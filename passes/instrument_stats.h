#pragma once
// Stage (i) instrumentation. Matches: every matmul. Rewrites: adds a quant_stats node
// on each of its two inputs (and on its result when ctx.stats_on_outputs) that
// quantizes the tensor in each candidate format (ctx.stat_formats, plus
// ctx.gradient_stat_formats for a gradient operand) along the operand's
// non-contracting dims and returns SQNR, absmax, mean square, zero and underflow
// fractions per format. A tensor read the same way by several GEMMs (x feeding q, k
// and v) gets one node, listing every GEMM operand it describes in `uses`. The nodes
// become graph outputs and feed nothing, so training numerics do not change. Run
// tag_metadata first (it supplies labels and roles). Reports a change when it added
// any node; a graph that already has its statistics nodes is left alone.
#include "passes/pass.h"

namespace pgq {

class InstrumentStats : public Pass {
 public:
  std::string_view name() const override { return "instrument_stats"; }
  bool run(Graph& graph, PassContext& ctx) override;
};

}  // namespace pgq
