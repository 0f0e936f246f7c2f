#pragma once
// bf16 conversions. AVX2 CPUs have no bf16 arithmetic; bf16 is emulated by
// rounding f32 values to bf16 precision and running f32 kernels on them, which is
// exact for GEMM products. Rounding is round-to-nearest-even on the bit pattern, so
// denormals round like normals; values above the largest bf16 round to +-inf like
// torch's .to(torch.bfloat16); NaN stays NaN (quiet) and +-inf stays +-inf.
#include <cstdint>

namespace pgq::kernels {

// y = x rounded to bf16 precision, kept in f32 storage. y may alias x.
void roundToBf16(const float* x, float* y, int64_t n);

// y = the bf16 bit patterns of x (same rounding).
void f32ToBf16(const float* x, uint16_t* y, int64_t n);

// y = x widened to f32 (exact).
void bf16ToF32(const uint16_t* x, float* y, int64_t n);

}  // namespace pgq::kernels
