#pragma once
// Softmax over the last dim, the causal attention mask, and the cross-entropy loss,
// on row-major f32 buffers. Rows are independent and split among OpenMP threads;
// results are identical for any thread count (the loss sums per-row values in a
// fixed order).
#include <cstdint>

namespace pgq::kernels {

// y = exp(x - max) / sum(exp(x - max)) over each row of [rows, cols]. A row whose
// entries are all -inf (fully masked) gives all zeros, not torch's NaN: such a row
// attends to nothing, and zeros keep NaN out of the rest of the step. y may alias x.
void softmax(const float* x, float* y, int64_t rows, int64_t cols);

// dx = y * (dy - sum(dy * y)) per row, from the softmax output y. dx may alias y or dy.
void softmaxGrad(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols);

// What an attention's softmax takes into its own pass (Megatron's and Transformer Engine's
// fused scale-mask-softmax): its input multiplied by `scale`, then, when `causal`, the
// causal mask below with `fill` over rows grouped as [.., tq, cols]. Each element is the
// one the separate kernels give (x * scale in f32, then the mask, then softmax; and
// backward softmaxGrad, the mask with 0, then * scale), so a fused graph's results equal
// the unfused graph's bit for bit.
struct SoftmaxPrologue {
  float scale = 1.0f;
  bool causal = false;
  float fill = 0.0f;
  int64_t tq = 1;  // rows per [tq, cols] matrix when causal
};

// y = softmax(causal_mask(x * scale){fill}) over each row of [rows, cols]. y may alias x.
void softmax(const float* x, float* y, int64_t rows, int64_t cols, const SoftmaxPrologue& prologue);
// dx = causal_mask(softmaxGrad(y, dy)){0} * scale, the gradient of the above with respect
// to its x. dx may alias y or dy.
void softmaxGrad(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols,
                 const SoftmaxPrologue& prologue);

// Causal mask over [batch, tq, tk] (queries aligned to the last tq keys):
// y[b,i,j] = value where j > i + (tk - tq), else x[b,i,j]. y may alias x.
void causalMask(const float* x, float* y, int64_t batch, int64_t tq, int64_t tk, float value);

// Mean over rows of -log softmax(logits[r])[targets[r]], logits [rows, cols].
// Throws KernelError when a target is outside [0, cols). rows == 0 gives 0.
float crossEntropy(const float* logits, const int32_t* targets, int64_t rows, int64_t cols);

// dlogits = (softmax(logits) - onehot(targets)) * dloss / rows. Throws like crossEntropy.
// dlogits may alias logits.
void crossEntropyGrad(const float* logits, const int32_t* targets, float dloss, float* dlogits,
                      int64_t rows, int64_t cols);

}  // namespace pgq::kernels
