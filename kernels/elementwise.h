#pragma once
// Elementwise f32 kernels on contiguous row-major buffers: unary maps, binary maps
// with row/column/scalar broadcasting, the activation gradients and select.
//
// All of them are memory-bound streams: AVX2 + FMA, OpenMP (static split) above
// ~16K elements, results identical for any thread count. Sizes are element counts;
// a negative size throws KernelError.
#include <cstdint>

namespace pgq::kernels {

enum class UnaryOp {
  kNeg,
  kExp,
  kLog,    // log(0) = -inf, log(x < 0) = NaN
  kRsqrt,  // 1 / sqrt(x), two correctly rounded operations
  kTanh,
  kRelu,   // max(x, 0); NaN stays NaN like torch.relu
  kGelu,   // tanh approximation: torch.nn.functional.gelu(x, approximate='tanh')
  kSqrt,   // correctly rounded
  kSigmoid,
  kErf,      // <= 3.4e-7 relative error
  kSilu,     // x * sigmoid(x)
  kGeluErf,  // exact gelu x * Phi(x): torch.nn.functional.gelu(x)
};

// y = op(x). y may alias x.
void unary(UnaryOp op, const float* x, float* y, int64_t n);

enum class BinaryOp {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMax,  // torch.maximum: NaN if either input is NaN
  kGe,   // 1.0f if a >= b else 0.0f
};

// How an operand covers the output, viewed as [outer, inner]: a full [outer, inner]
// tensor (kFull), a row of `inner` values repeated for every outer index (kRow), a
// column of `outer` values repeated along inner (kCol), or one scalar (kScalar). The
// executor runs broadcasts through this without materializing them.
enum class Bcast { kFull, kRow, kCol, kScalar };

// y[o, i] = op(a[o, i], b[o, i]) with each operand read per its Bcast. y may alias a
// kFull operand (but not a broadcast one).
void binary(BinaryOp op, const float* a, Bcast a_bcast, const float* b, Bcast b_bcast, float* y,
            int64_t outer, int64_t inner);

// dx = dy * d/dx gelu_tanh(x). dx may alias x or dy.
void geluGrad(const float* x, const float* dy, float* dx, int64_t n);

// dx = dy * d/dx silu(x). dx may alias x or dy.
void siluGrad(const float* x, const float* dy, float* dx, int64_t n);

// dx = dy * d/dx gelu_erf(x) = dy * (Phi(x) + x phi(x)). dx may alias x or dy.
void geluErfGrad(const float* x, const float* dy, float* dx, int64_t n);

// dx = dy where x > 0, else 0. dx may alias x or dy.
void reluGrad(const float* x, const float* dy, float* dx, int64_t n);

// SwiGLU (LLaMA's MLP activation, fuse_swiglu): y = silu(gate) * up, each element the
// product of the silu kernel's value and up, as the two separate kernels give it. y may
// alias gate or up.
void swiglu(const float* gate, const float* up, float* y, int64_t n);

// Its gradients, each element as the separate kernels give it: with respect to gate,
// dx = (dy * up) * silu'(gate) (siluGrad of the product); to up, dx = dy * silu(gate)
// (`up` unread, may be null). dx may alias any operand.
enum class SwigluOperand { kGate, kUp };
void swigluGrad(SwigluOperand wrt, const float* gate, const float* up, const float* dy, float* dx, int64_t n);

// y = a where cond != 0 (NaN counts as nonzero), else b. y may alias any operand.
void select(const float* cond, const float* a, const float* b, float* y, int64_t n);

// y[0..n) = v.
void fill(float* y, int64_t n, float v);

// y[0..n) = x[0..n); the buffers must not overlap unless y == x.
void copy(const float* x, float* y, int64_t n);

}  // namespace pgq::kernels
