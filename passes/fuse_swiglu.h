#pragma once
// Fuses LLaMA's SwiGLU, on the forward graph before autodiff (after fuse_decomposed has
// made an import's x * sigmoid(x) a silu), so the backward gets the fused gradients:
//   mul(silu(gate), up) or mul(up, silu(gate))  ->  swiglu(gate, up)
// on f32 values, the silu used by the mul alone and not a graph output. Forward, one pass
// reads gate and up instead of two passes and the silu's value; backward, autodiff's
// swiglu_grad gives each operand's gradient in one pass (three before: two muls and
// silu_grad), and no silu value is kept from the forward. Every element is computed as
// the separate kernels compute it, so the results are the same bit for bit. Rewrites:
// uses of the mul move to the swiglu; the silu and the mul are left for `dce`.
#include "passes/pass.h"

namespace pgq {

class FuseSwiglu : public Pass {
 public:
  std::string_view name() const override { return "fuse_swiglu"; }
  bool run(Graph& graph, PassContext& ctx) override;
};

}  // namespace pgq
