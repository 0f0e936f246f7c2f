#pragma once
// Optimizer kernels: the fused AdamW update and the sum of squares behind the global
// gradient norm (gradient clipping).
#include <cstdint>

namespace pgq::kernels {

struct AdamWParams {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  int64_t step;  // 1-based: the step being taken, for bias correction
};

// One torch.optim.AdamW step (torch 1.13 _single_tensor_adamw, amsgrad off) over n
// parameters, in place on param, m (exp_avg) and v (exp_avg_sq), with
// g = grad * grad_scale (grad_scale = clip factor, 1 for none):
//   param *= 1 - lr * wd;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// Throws KernelError when step < 1.
void adamwUpdate(float* param, const float* grad, float* m, float* v, int64_t n,
                 const AdamWParams& p, float grad_scale);

// Sum of x^2 in f64. Blocks of 4096 elements are summed separately and then added in
// block order, so the result is identical for any thread count.
double sumSquares(const float* x, int64_t n);

}  // namespace pgq::kernels
