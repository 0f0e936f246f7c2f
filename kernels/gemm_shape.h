#pragma once
// GEMM shapes and how each operand is stored. Quantization scales run along the
// non-contracting dimension of an operand (one per row of an [M,K] activation, one per
// column of a [K,N] weight), so the quantizers need to know which stored axis is the
// contracting one; OperandView says that without knowing anything about GEMMs.
#include <cstdint>

namespace pgq::kernels {

// C = op(A) x op(B), batches contiguous:  // [batch,M,K] x [batch,K,N] -> [batch,M,N]
struct GemmShape {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  // A is stored [K,M] instead of [M,K] (the weight-gradient GEMM: dW = X^T dY).
  bool trans_a = false;
  // B is stored [N,K] instead of [K,N] (the input-gradient GEMM: dX = dY W^T).
  bool trans_b = false;

  // Throws KernelError unless every dimension is >= 1.
  void validate() const;
  int64_t sizeA() const { return batch * m * k; }
  int64_t sizeB() const { return batch * k * n; }
  int64_t sizeC() const { return batch * m * n; }
  double flops() const { return 2.0 * double(batch) * double(m) * double(n) * double(k); }
  bool operator==(const GemmShape&) const = default;
};

// Which operand of a GEMM a tensor is. The lhs (A) is stored as u8 and the rhs (B) as s8
// because oneDNN's AVX2 int8 GEMM is fastest for u8 x s8 (bench/gemm_bench.cc).
enum class GemmSide { kLhs, kRhs };

// A GEMM operand as stored in memory: `batch` contiguous row-major [rows, cols]
// matrices. contract_along_cols says whether the contracting (K) dimension runs along
// the columns: A [M,K] true, A stored [K,M] false, B [K,N] false, B stored [N,K] true.
// Channels (the non-contracting dimension) are what per-channel scales run along.
struct OperandView {
  int64_t batch = 1;
  int64_t rows = 0;
  int64_t cols = 0;
  bool contract_along_cols = true;

  // Throws KernelError unless every dimension is >= 1.
  void validate() const;
  int64_t elements() const { return batch * rows * cols; }
  int64_t channels() const { return contract_along_cols ? rows : cols; }
  int64_t contractLength() const { return contract_along_cols ? cols : rows; }
  bool operator==(const OperandView&) const = default;
};

// The stored layout of A and B for a GEMM shape.
OperandView lhsView(const GemmShape& shape);
OperandView rhsView(const GemmShape& shape);

}  // namespace pgq::kernels
