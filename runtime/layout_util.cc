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

BroadcastCopy::BroadcastCopy(const std::vector<int64_t>& out_dims, const std::vector<int64_t>& src_strides) {
  // Dim d joins the one before it when that one's stride is d's stride times d's size:
  // index (i, j) then reads i * size * stride + j * stride, one dim of both sizes.
  for (size_t d = 0; d < out_dims.size(); ++d) {
    if (!out_dims_.empty() && src_strides_.back() == src_strides[d] * out_dims[d]) {
      out_dims_.back() *= out_dims[d];
      src_strides_.back() = src_strides[d];
    } else {
      out_dims_.push_back(out_dims[d]);
      src_strides_.push_back(src_strides[d]);
    }
  }
}

void BroadcastCopy::run(const float* src, float* out) const {
  // Rows over all but the last dim; the last dim is a contiguous copy, a fill or a strided
  // read.
  const size_t rank = out_dims_.size();
  if (rank == 0) {
    out[0] = src[0];
    return;
  }
  const int64_t inner = out_dims_.back();
  const int64_t inner_stride = src_strides_.back();
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < rank; ++d) outer *= out_dims_[d];
  auto copyRow = [&](int64_t row) {
    int64_t src_offset = 0;
    for (size_t d = rank - 1, rest = static_cast<size_t>(row); d-- > 0;) {
      src_offset += static_cast<int64_t>(rest % static_cast<size_t>(out_dims_[d])) * src_strides_[d];
      rest /= static_cast<size_t>(out_dims_[d]);
    }
    float* dst = out + row * inner;
    if (inner_stride == 1) {
      std::memcpy(dst, src + src_offset, static_cast<size_t>(inner) * sizeof(float));
    } else if (inner_stride == 0) {
      std::fill(dst, dst + inner, src[src_offset]);
    } else {
      for (int64_t j = 0; j < inner; ++j) dst[j] = src[src_offset + j * inner_stride];
    }
  };
  // Small copies stay on one thread: starting a team costs more than they do.
  constexpr int64_t kParallelElements = int64_t{1} << 16;
#pragma omp parallel for schedule(static) if (outer > 1 && outer * inner >= kParallelElements)
  for (int64_t row = 0; row < outer; ++row) copyRow(row);
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
