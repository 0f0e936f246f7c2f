#pragma once
// Stage (iii) rewrite. Matches: every live matmul the recipe in ctx.recipe decides to
// run in int8 (passes/recipe.h; tag_metadata must have run). Rewrites each into
//
//   %pa = quant_params(%a) {format, side="lhs", contract_dims, batch_dims}   // scales
//   %qa = quantize(%a, %pa) {format, side="lhs", ..., seed}                   // u8
//   %pb, %qb likewise for the rhs (s8)
//   %y  = qmatmul(%qa, %qb, %pa, %pb) {dims, lhs_format, rhs_format, tags...} // s32 -> f32
//
// with scales computed dynamically every step along each operand's non-contracting
// dims and the rounding (nearest or stochastic) and refinements the recipe's formats
// name (per-block scales, clipping, zero points). With `smooth: alpha` the operands
// first go through SmoothQuant: %s = smooth_scales(%a, %b), then a / s and b * s
// along the contracting dims. An operand whose dims are not in an order the int8 kernel reads gets a
// transpose first; a bf16 operand is quantized from its f32 source. The matmul is left
// dead for `dce`. Reports a change when any GEMM was rewritten; a recipe that
// quantizes nothing changes nothing.
#include "passes/pass.h"

namespace pgq {

class QuantizeGemms : public Pass {
 public:
  std::string_view name() const override { return "quantize_gemms"; }
  bool run(Graph& graph, PassContext& ctx) override;
};

}  // namespace pgq
