#include "runtime/layout_util.h"

#include <cstring>

#include <algorithm>

namespace pgq {
namespace {

std::vector<int64_t> concat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

GemmLayout gemmLayout(const Shape& lhs, const Shape& rhs, const DotDims& dims) {
  GemmSizes sizes = gemmSizes(lhs, rhs, dims);
  GemmLayout layout;
  layout.shape.batch = sizes.batch;
  layout.shape.m = sizes.m;
  layout.shape.k = sizes.k;
  layout.shape.n = sizes.n;
  // A: [B, M, K] or [B, K, M] (trans_a); otherwise permute to [B, M, K].
  switch (operandOrder(lhs.rank(), dims.lhs_contract, dims.lhs_batch)) {
    case OperandOrder::kFreeFirst: layout.shape.trans_a = false; break;
    case OperandOrder::kContractFirst: layout.shape.trans_a = true; break;
    case OperandOrder::kNeedsPermute:
      layout.lhs_perm = concat({dims.lhs_batch, dims.lhsFree(lhs.rank()), dims.lhs_contract});
  }
  // B: [B, K, N] or [B, N, K] (trans_b); otherwise permute to [B, K, N].
  switch (operandOrder(rhs.rank(), dims.rhs_contract, dims.rhs_batch)) {
    case OperandOrder::kContractFirst: layout.shape.trans_b = false; break;
    case OperandOrder::kFreeFirst: layout.shape.trans_b = true; break;
    case OperandOrder::kNeedsPermute:
      layout.rhs_perm = concat({dims.rhs_batch, dims.rhs_contract, dims.rhsFree(rhs.rank())});
  }
  return layout;
}

QuantViewLayout quantViewLayout(const Shape& shape, const std::vector<int64_t>& contract,
                                const std::vector<int64_t>& batch) {
  std::vector<int64_t> free = freeDimsOf(shape.rank(), contract, batch);
  auto product = [&](const std::vector<int64_t>& dims) {
    int64_t p = 1;
    for (int64_t d : dims) p *= shape.dim(static_cast<int>(d));
    return p;
  };
  const int64_t nb = product(batch), nf = product(free), nc = product(contract);
  QuantViewLayout layout;
  switch (operandOrder(shape.rank(), contract, batch)) {
    case OperandOrder::kFreeFirst: layout.view = {nb, nf, nc, true}; break;
    case OperandOrder::kContractFirst: layout.view = {nb, nc, nf, false}; break;
    case OperandOrder::kNeedsPermute:
      layout.view = {nb, nf, nc, true};
      layout.perm = concat({batch, free, contract});
  }
  return layout;
}

ReduceLayout reduceLayout(const Shape& in, const std::vector<int64_t>& axes) {
  ReduceLayout layout;
  bool adjacent = true;
  for (size_t i = 1; i < axes.size(); ++i) adjacent = adjacent && axes[i] == axes[i - 1] + 1;
  if (adjacent) {
    int first = static_cast<int>(axes.front()), last = static_cast<int>(axes.back());
    layout.outer = in.product(0, first);
    layout.mid = in.product(first, last + 1);
    layout.inner = in.product(last + 1, in.rank());
    return layout;
  }
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < in.rank(); ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) kept.push_back(d);
  layout.perm = concat({kept, axes});
  layout.mid = 1;
  for (int64_t d : axes) layout.mid *= in.dim(static_cast<int>(d));
  layout.outer = in.numElements() / layout.mid;
  layout.inner = 1;
  return layout;
}

BroadcastCopy broadcastCopy(const Shape& in, const Shape& out, const std::vector<int64_t>& dims) {
  std::vector<int64_t> in_strides(static_cast<size_t>(in.rank()), 1);
  for (int i = in.rank() - 2; i >= 0; --i)
    in_strides[static_cast<size_t>(i)] = in_strides[static_cast<size_t>(i + 1)] * in.dim(i + 1);
  std::vector<int64_t> strides(static_cast<size_t>(out.rank()), 0);
  for (size_t i = 0; i < dims.size(); ++i) strides[static_cast<size_t>(dims[i])] = in_strides[i];
  return BroadcastCopy(std::vector<int64_t>(out.dims().begin(), out.dims().end()), strides);
}

void BroadcastCopy::run(const float* src, float* out) const {
  // Odometer over all but the last dim; the last dim is a contiguous copy or a fill.
  const size_t rank = out_dims_.size();
  if (rank == 0) {
    out[0] = src[0];
    return;
  }
  const int64_t inner = out_dims_.back();
  const int64_t inner_stride = src_strides_.back();
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < rank; ++d) outer *= out_dims_[d];
  std::vector<int64_t> index(rank, 0);
  int64_t src_offset = 0;
  for (int64_t row = 0; row < outer; ++row) {
    float* dst = out + row * inner;
    for (int64_t j = 0; j < inner; ++j) dst[j] = src[src_offset + j * inner_stride];
    for (size_t d = rank - 1; d-- > 0;) {
      src_offset += src_strides_[d];
      if (++index[d] < out_dims_[d]) break;
      src_offset -= src_strides_[d] * out_dims_[d];
      index[d] = 0;
    }
  }
}

PartLayout partLayout(const Shape& block, int64_t dim, int64_t parts) {
  PartLayout l;
  l.parts = parts;
  l.part = block.dim(static_cast<int>(dim));
  for (int i = 0; i < dim; ++i) l.outer *= block.dim(i);
  for (int i = static_cast<int>(dim) + 1; i < block.rank(); ++i) l.inner *= block.dim(i);
  return l;
}

void toPartMajor(const PartLayout& l, const float* whole, float* part_major) {
  const int64_t row = l.part * l.inner;
  for (int64_t p = 0; p < l.parts; ++p)
    for (int64_t o = 0; o < l.outer; ++o)
      std::memcpy(part_major + (p * l.outer + o) * row, whole + (o * l.parts + p) * row,
                  static_cast<size_t>(row) * sizeof(float));
}

void fromPartMajor(const PartLayout& l, const float* part_major, float* whole) {
  const int64_t row = l.part * l.inner;
  for (int64_t p = 0; p < l.parts; ++p)
    for (int64_t o = 0; o < l.outer; ++o)
      std::memcpy(whole + (o * l.parts + p) * row, part_major + (p * l.outer + o) * row,
                  static_cast<size_t>(row) * sizeof(float));
}

void copyBlock(const PartLayout& l, const float* whole, int64_t index, float* block) {
  const int64_t row = l.part * l.inner;
  for (int64_t o = 0; o < l.outer; ++o)
    std::memcpy(block + o * row, whole + (o * l.parts + index) * row, static_cast<size_t>(row) * sizeof(float));
}

}  // namespace pgq
