#pragma once
// SmoothQuant (Xiao et al., 2023): migrate quantization difficulty from activation
// outliers to the weight by a per-contracting-channel factor s_k,
//   A B = (A diag(1/s)) (diag(s) B),   s_k = max|A_k|^alpha / max|B_k|^(1 - alpha),
// where A_k is A's channel k of the contracting dimension (a column of A [M,K]) and B_k
// B's (a row of B [K,N]); maxima run over all rows/columns and batches.
#include <span>

#include "kernels/gemm_shape.h"

namespace pgq::kernels {

// Fills s[0, K). alpha must be in [0, 1]. NaN/Inf are ignored in the maxima. A channel
// that is all zero (or non-finite) on either side gets s_k = 1 (nothing to migrate), as
// does a factor that is not a finite positive float. Throws KernelError when the views
// disagree on K or the buffers do not match them.
void smoothQuantFactors(std::span<const float> a, const OperandView& view_a,
                        std::span<const float> b, const OperandView& view_b, float alpha,
                        std::span<float> s);

}  // namespace pgq::kernels
