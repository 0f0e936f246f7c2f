#pragma once
// How IR values map onto the row-major layouts kernels read: a matmul's operands as
// a (batched, possibly transposed) GEMM, a reduction as [outer, mid, inner], and a
// broadcast as a strided copy. When an operand's dims are not in an order a kernel can
// read with strides, a permutation into scratch memory makes them so.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "ir/dot_dims.h"
#include "kernels/gemm_shape.h"

namespace pgq {

struct GemmLayout {
  kernels::GemmShape shape;
  // When set, the operand is permuted (transpose perm) before the GEMM, after which it
  // is stored without a transposition flag.
  std::optional<std::vector<int64_t>> lhs_perm;
  std::optional<std::vector<int64_t>> rhs_perm;
};

// The matmul's result is [batch dims, lhs free dims, rhs free dims], i.e. [B, M, N].
GemmLayout gemmLayout(const Shape& lhs, const Shape& rhs, const DotDims& dims);

struct ReduceLayout {
  int64_t outer = 1;
  int64_t mid = 1;
  int64_t inner = 1;
  std::optional<std::vector<int64_t>> perm;  // applied first when the axes are not adjacent
};

ReduceLayout reduceLayout(const Shape& in, const std::vector<int64_t>& axes);

// A tensor read as a quantized GEMM operand: the kernels' OperandView of its storage,
// after an optional permute into [batch, free, contract] when its dims are in an
// order the kernels cannot read directly.
struct QuantViewLayout {
  kernels::OperandView view;
  std::optional<std::vector<int64_t>> perm;
};

QuantViewLayout quantViewLayout(const Shape& shape, const std::vector<int64_t>& contract,
                                const std::vector<int64_t>& batch);

// Materializes broadcast(x) {dims}: out dims not in `dims` repeat.
class BroadcastCopy {
 public:
  BroadcastCopy(std::vector<int64_t> out_dims, std::vector<int64_t> src_strides)
      : out_dims_(std::move(out_dims)), src_strides_(std::move(src_strides)) {}
  void run(const float* src, float* out) const;

 private:
  std::vector<int64_t> out_dims_;
  std::vector<int64_t> src_strides_;  // per out dim; 0 where the dim repeats
};

BroadcastCopy broadcastCopy(const Shape& in, const Shape& out, const std::vector<int64_t>& dims);

}  // namespace pgq
