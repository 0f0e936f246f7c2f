#include "runtime/sharding.h"

#include <cstring>
#include <vector>

#include "support/errors.h"

namespace pgq {
namespace {

// `shape` seen as [outer, dim, inner] around `dim`.
void around(const Shape& shape, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int i = 0; i < dim; ++i) outer *= shape.dim(i);
  for (int i = static_cast<int>(dim) + 1; i < shape.rank(); ++i) inner *= shape.dim(i);
}

}  // namespace

std::optional<ParamSplit> paramSplit(const Node& param) {
  if (!param.attrs().has(AttrKey::kSplit)) return std::nullopt;
  const std::vector<int64_t>& s = param.attrs().getInts(AttrKey::kSplit);
  if (s[1] <= 1) return std::nullopt;
  return ParamSplit{s[0], s[1]};
}

TensorType globalType(const Node& param) {
  std::optional<ParamSplit> s = paramSplit(param);
  if (!s) return param.type();
  std::vector<int64_t> dims(param.shape().dims().begin(), param.shape().dims().end());
  dims[static_cast<size_t>(s->dim)] *= s->devices;
  return {param.dtype(), Shape(std::move(dims))};
}

Tensor shardOf(const Tensor& full, int64_t dim, int64_t index, int64_t parts) {
  PGQ_ASSERT(full.dtype() == DType::kF32 && full.shape().dim(static_cast<int>(dim)) % parts == 0,
             "shard {} of {} along {} of {}", index, parts, dim, full.type().toString());
  std::vector<int64_t> dims(full.shape().dims().begin(), full.shape().dims().end());
  dims[static_cast<size_t>(dim)] /= parts;
  Tensor part(TensorType{DType::kF32, Shape(dims)});
  int64_t outer = 0, inner = 0;
  around(full.shape(), dim, outer, inner);
  const int64_t row = dims[static_cast<size_t>(dim)] * inner;
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(part.data<float>() + o * row, full.data<float>() + (o * parts + index) * row,
                static_cast<size_t>(row) * sizeof(float));
  return part;
}

Tensor gatherShards(const Tensor& local, int64_t dim, Collectives& comm) {
  const int64_t parts = comm.size(DeviceGroup::kTensor);
  std::vector<int64_t> dims(local.shape().dims().begin(), local.shape().dims().end());
  dims[static_cast<size_t>(dim)] *= parts;
  Tensor full(TensorType{DType::kF32, Shape(dims)});
  std::vector<float> blocks(static_cast<size_t>(local.numElements() * parts));
  comm.allGather(local.data<float>(), blocks.data(), local.numElements(), DeviceGroup::kTensor);
  int64_t outer = 0, inner = 0;
  around(local.shape(), dim, outer, inner);
  const int64_t row = local.shape().dim(static_cast<int>(dim)) * inner;
  for (int64_t p = 0; p < parts; ++p)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(full.data<float>() + (o * parts + p) * row, blocks.data() + (p * outer + o) * row,
                  static_cast<size_t>(row) * sizeof(float));
  return full;
}

}  // namespace pgq
