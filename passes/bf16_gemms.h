#pragma once
// bf16 precision for GEMMs (autocast-style). Matches: every matmul whose operands are
// f32. Rewrites: each operand is converted to bf16 (one convert per value, shared by
// all the GEMMs that read it) and the matmul reads the bf16 values; it still
// accumulates and returns f32, which is exactly what a bf16 GEMM with f32
// accumulation computes. Everything outside GEMMs stays f32. The replaced matmuls are
// left dead for `dce`. Reports a change when any matmul was rewritten.
#include "passes/pass.h"

namespace pgq {

class Bf16Gemms : public Pass {
 public:
  std::string_view name() const override { return "bf16_gemms"; }
  bool run(Graph& graph, PassContext& ctx) override;
};

}  // namespace pgq
