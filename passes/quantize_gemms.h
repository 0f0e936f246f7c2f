#pragma once
// Stage (iii) rewrite. Matches: every live matmul the recipe decides to run in int8
// (plan/recipe.h; tag_metadata must have run). The recipe is applied as written: an
// int8 entry is rewritten whatever the roofline estimates, since whether int8 pays off
// was decided when the recipe was made (or by whoever edited it). Rewrites each into
// its quantized form (passes/quantized_gemm.h):
//
//   %pa = quant_params(%a) {format, side="lhs", contract_dims, batch_dims}   // scales
//   %qa = quantize(%a, %pa) {format, side="lhs", ..., seed}                   // u8
//                                  (seeds `seed`, `seed`+1, ... in rewrite order)
//   %pb, %qb likewise for the rhs (s8)
//   %y  = qmatmul(%qa, %qb, %pa, %pb) {dims, lhs_format, rhs_format, tags...} // s32 -> f32
//
// with scales computed dynamically every step along each operand's non-contracting
// dims and the rounding (nearest or stochastic) and refinements the recipe's formats
// name (per-block scales, clipping, zero points); FP8/MX formats run as fake_quant and
// an f32 matmul. With `smooth: alpha` the operands first go through SmoothQuant. The
// quantized GEMM takes the matmul's tags and its uses; the matmul is left
// dead for `dce`. Reports a change when any GEMM was rewritten; a recipe that
// quantizes nothing changes nothing.
#include <cstdint>
#include <optional>

#include "passes/pass.h"
#include "passes/pass_options.h"

namespace pgq {

struct QuantizeGemmsOptions {
  std::optional<Recipe> recipe;  // required
  int64_t seed = 0;              // of the first quantize node's stochastic-rounding stream
};

class QuantizeGemms : public Pass {
 public:
  using Options = QuantizeGemmsOptions;
  static constexpr PassOption<Options> kOptions[] = {
      {.key = "recipe", .member = &Options::recipe, .help = "the per-GEMM decisions to apply", .required = true},
      {.key = "seed", .member = &Options::seed,
       .help = "the rounding seed of the first quantize node; the next ones count up"},
  };

  explicit QuantizeGemms(Options options) : options_(std::move(options)) {}
  std::string_view name() const override { return "quantize_gemms"; }
  // Throws pgq::Error without a recipe.
  bool run(Graph& graph, PassContext& ctx) override;

 private:
  Options options_;
};

}  // namespace pgq
