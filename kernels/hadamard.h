#pragma once
// The random Hadamard transform (RHT) of a GEMM operand along its contracting dimension,
// as NVIDIA's NVFP4 recipe applies it to the weight-gradient GEMM's inputs (arXiv
// 2509.25149, sec. 4.2; Transformer Engine's `hadamard_transform` with a random sign
// mask): every run of 16 consecutive contracting elements x becomes y = H D x, H the
// 16x16 Sylvester-Hadamard matrix divided by 4 (orthonormal, symmetric) and D a diagonal
// of random signs. Both operands of a GEMM take the same D, so the product is unchanged:
// sum_k a_k b_k = (H D a) . (H D b) because (H D)^T (H D) = I. The transform spreads an
// outlier over its 16-block, which lowers the block's absmax relative to its RMS and so
// the 4-bit error.
//
// The signs: sign j (0..15) is bit j of a 64-bit mix (splitmix64) of `step`, so they
// change every step and agree between the operands of a step, whatever tensor they
// belong to. A GEMM's transform needs a contracting length that is a multiple of 16
// (KernelError otherwise).
#include <cstdint>
#include <span>

#include "kernels/gemm_shape.h"

namespace pgq::kernels {

// The 16 signs (+1 / -1) of `step`'s transform.
void hadamardSigns(uint64_t step, float signs[16]);

// out = H D x along the contracting dimension of `view` (inverse = false), or
// x = D H out's inverse, D H y (inverse = true). x and out may be the same buffer.
void hadamardTransform(std::span<const float> x, const OperandView& view, uint64_t step,
                       bool inverse, std::span<float> out);

}  // namespace pgq::kernels
