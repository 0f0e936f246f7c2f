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

// A whole value [outer, parts x part, inner] split along its middle dim into `parts`
// blocks (tensor-parallel devices). MPI gathers and scatters the blocks part-major,
// [parts, outer, part, inner]; these copy between that order and the value's own, and
// take one block out of the whole value.
struct PartLayout {
  int64_t outer = 1;
  int64_t part = 1;  // the block's size along the split dim
  int64_t inner = 1;
  int64_t parts = 1;
  int64_t blockElements() const { return outer * part * inner; }
};
// The layout of a block of shape `block`, split along `dim` into `parts`.
PartLayout partLayout(const Shape& block, int64_t dim, int64_t parts);
void toPartMajor(const PartLayout& l, const float* whole, float* part_major);
void fromPartMajor(const PartLayout& l, const float* part_major, float* whole);
void copyBlock(const PartLayout& l, const float* whole, int64_t index, float* block);

// Materializes broadcast(x) {dims}: out dims not in `dims` repeat. Adjacent dims that
// step through the source as one (both read along, or both repeated) are merged, so a
// GQA head broadcast [b, kv, 2, t, d] of [b, kv, t, d] copies whole [t, d] blocks; rows
// are split among OpenMP threads.
class BroadcastCopy {
 public:
  BroadcastCopy(const std::vector<int64_t>& out_dims, const std::vector<int64_t>& src_strides);
  void run(const float* src, float* out) const;

 private:
  std::vector<int64_t> out_dims_;
  std::vector<int64_t> src_strides_;  // per out dim; 0 where the dim repeats
};

BroadcastCopy broadcastCopy(const Shape& in, const Shape& out, const std::vector<int64_t>& dims);

}  // namespace pgq
