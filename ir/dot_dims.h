#pragma once
// The dimension numbers of a matmul (dot_general): which dims of each operand are
// contracted and which are batch dims. Everything else is a free dim. Result dims
// are batch dims, then lhs free dims, then rhs free dims.
#include <cstdint>
#include <vector>

#include "ir/attr.h"
#include "ir/shape.h"

namespace pgq {

struct DotDims {
  std::vector<int64_t> lhs_contract;
  std::vector<int64_t> rhs_contract;
  std::vector<int64_t> lhs_batch;
  std::vector<int64_t> rhs_batch;

  // Reads the dims from matmul attributes (batch dims default to none).
  static DotDims fromAttrs(const Attrs& attrs);
  // Writes them: contracting dims always, batch dims only when there are any.
  void toAttrs(Attrs& attrs) const;

  std::vector<int64_t> lhsFree(int lhs_rank) const;
  std::vector<int64_t> rhsFree(int rhs_rank) const;

  // The plain 2-D product [M,K] x [K,N] -> [M,N].
  static DotDims matrix() { return {{1}, {0}, {}, {}}; }
};

// A matmul seen as a (batched) GEMM: batch x ([M,K] x [K,N]).
struct GemmSizes {
  int64_t batch = 1;
  int64_t m = 1;
  int64_t k = 1;
  int64_t n = 1;

  double flops() const { return 2.0 * static_cast<double>(batch * m) * static_cast<double>(k * n); }
};

// How a GEMM kernel can read one operand of rank `rank` stored row-major: as [batch,
// free, contract] (`kFreeFirst`: A [M,K], or B stored [N,K]), as [batch, contract, free]
// (`kContractFirst`: A stored [K,M], or B [K,N]), or only after a permutation.
// Free dims count in ascending order, contracting dims in the order given (they pair
// with the other operand's), batch dims in the order given.
enum class OperandOrder { kFreeFirst, kContractFirst, kNeedsPermute };
OperandOrder operandOrder(int rank, const std::vector<int64_t>& contract, const std::vector<int64_t>& batch);
// The dims of an operand that are neither contracting nor batch, ascending.
std::vector<int64_t> freeDimsOf(int rank, const std::vector<int64_t>& contract, const std::vector<int64_t>& batch);

// Checks the dims against the operand shapes (throws pgq::Error saying what is wrong)
// and returns the result shape.
Shape dotResultShape(const Shape& lhs, const Shape& rhs, const DotDims& dims);
GemmSizes gemmSizes(const Shape& lhs, const Shape& rhs, const DotDims& dims);

}  // namespace pgq
