#pragma once
// Fuses decomposed activations and normalizations (as ONNX exports spell them) into
// pgq's fused ops, on the forward graph before autodiff, so both the forward and the
// derived backward use the fused kernels. Matches (factors of a product and terms of a
// sum in any order; splats are constants, or reshapes/broadcasts of one):
//   x * sigmoid(x)                                        -> silu(x)
//   0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) -> gelu(x)
//   0.5 * x * (1 + erf(x / sqrt 2))                       -> gelu_erf(x)
//   x * s, s = 1 / sqrt(mean(x * x) + eps) over the last dim -> rms_norm(x){eps}
//   d * s, d = x - mean(x), s as above over d              -> layer_norm(x){eps}
// where `* s` is also written `/ sqrt(..)`, `* rsqrt(..)` or `* (1 / sqrt(..))`, and the
// row values (mean, variance, s) may be reshaped to keepdims form and broadcast back.
// Constants must match within 1e-4 relative, eps must be positive. A pattern fuses only
// when every value inside it is used by the pattern alone, so the graph computes the
// same function. Rewrites: uses of the pattern's result move to the fused node; the
// pattern's nodes become dead and are left for `dce`.
#include "passes/pass.h"

namespace pgq {

class FuseDecomposed : public Pass {
 public:
  std::string_view name() const override { return "fuse_decomposed"; }
  bool run(Graph& graph, PassContext& ctx) override;
};

}  // namespace pgq
