#pragma once
// Optimizer kernels: the fused AdamW update and the sum of squares behind the global
// gradient norm (gradient clipping).
#include <cstdint>
#include <span>

#include "kernels/gemm_shape.h"
#include "kernels/quant_format.h"

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

// One quantization of the parameter an update writes: the GEMM operand a graph's quantize
// makes of it, which depends on nothing but the parameter's values.
struct ParamQuantization {
  OperandView view;         // of the parameter (view.elements() == n)
  QuantFormat format;       // fusesIntoUpdate(view, format)
  GemmSide side;            // kLhs: u8 storage, kRhs: s8
  std::span<float> params;  // quantParamCount(view, format) floats
  void* out;                // n bytes
};

// Whether adamwUpdateQuantized makes this quantization: an integer grid rounded to
// nearest with f32 scales computed from the values (no clipping, Hadamard or 2-D
// blocks), per channel or per block along the rows of the stored matrix, or per channel
// along its columns (batch 1).
bool fusesIntoUpdate(const OperandView& view, const QuantFormat& format);

// adamwUpdate, then each quantization of the updated parameter, equal bit for bit to
// adamwUpdate followed by quantizeDynamic for each. The parameter is updated in chunks of
// rows: while a chunk is in cache its rows' scales and integers are made (scales along the
// rows) or its column ranges folded in (scales along the columns, quantized in a second
// pass once every row is in). A separate quantization reads the parameter twice (scales
// along the columns) or once (along the rows) more from memory. Throws KernelError for a
// quantization fusesIntoUpdate refuses or whose sizes do not match n.
void adamwUpdateQuantized(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p,
                          float grad_scale, std::span<const ParamQuantization> quantizations);

// Sum of x^2 in f64. Blocks of kSumSquaresBlock elements are summed separately (with
// vec::sumVectors) and then added in block order, so the result is identical for any
// thread count; int8Gemm (gemm.h) sums its output's squares the same way.
inline constexpr int64_t kSumSquaresBlock = 4096;
double sumSquares(const float* x, int64_t n);

}  // namespace pgq::kernels
