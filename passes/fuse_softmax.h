#pragma once
// Takes an attention's scale and causal mask into its softmax (Megatron's and
// Transformer Engine's fused scale-mask-softmax), on the forward graph before autodiff,
// so the backward gets the fused gradient too. Matches, on f32 values:
//   softmax(causal_mask(x * c){v})  -> softmax{scale = c, causal = v}(x)
//   softmax(causal_mask(x){v})      -> softmax{causal = v}(x)
//   softmax(x * c)                  -> softmax{scale = c}(x)
// where c is a splat (a constant, or a reshape or broadcast of one) on either side of
// the mul. The mul and the mask must be used by the pattern alone and not be graph
// outputs, and the softmax must not carry a prologue already. The fused kernels compute
// each element as the separate ones do, so a fused graph gives the same results bit for
// bit; each step saves the mul's and the mask's passes over the scores, forward and
// backward. Rewrites: uses of the softmax move to the fused node; the pattern's nodes
// become dead and are left for `dce`.
#include "passes/pass.h"

namespace pgq {

class FuseSoftmax : public Pass {
 public:
  std::string_view name() const override { return "fuse_softmax"; }
  bool run(Graph& graph, PassContext& ctx) override;
};

}  // namespace pgq
