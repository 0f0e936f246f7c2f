#pragma once
// Stage (iii) check. Matches: every matmul and qmatmul tagged by tag_metadata.
// Rewrites: sets `est_speedup`, the roofline estimate (passes/hardware.h) of how much
// faster the GEMM runs in int8 on ctx.hardware, quantization traffic included, at its
// per-device shape. A GEMM is an int8 candidate when est_speedup >= ctx.min_speedup.
// Does nothing without ctx.hardware. Reports a change when any estimate was added or
// changed.
#include "passes/pass.h"

namespace pgq {

class RooflineFilter : public Pass {
 public:
  std::string_view name() const override { return "roofline_filter"; }
  bool run(Graph& graph, PassContext& ctx) override;
};

// True when `gemm` carries an estimate below the margin.
bool rooflineRejects(const Node& gemm, double min_speedup);

}  // namespace pgq
