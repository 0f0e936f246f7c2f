#include "runtime/sharding.h"

#include <vector>

#include "runtime/layout_util.h"
#include "support/errors.h"

namespace pgq {

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
  copyBlock(partLayout(part.shape(), dim, parts), full.data<float>(), index, part.data<float>());
  return part;
}

Tensor gatherShards(const Tensor& local, int64_t dim, Collectives& comm) {
  const int64_t parts = comm.size(DeviceGroup::kTensor);
  std::vector<int64_t> dims(local.shape().dims().begin(), local.shape().dims().end());
  dims[static_cast<size_t>(dim)] *= parts;
  Tensor full(TensorType{DType::kF32, Shape(dims)});
  std::vector<float> blocks(static_cast<size_t>(local.numElements() * parts));
  comm.allGather(local.data<float>(), blocks.data(), local.numElements(), DeviceGroup::kTensor);
  fromPartMajor(partLayout(local.shape(), dim, parts), blocks.data(), full.data<float>());
  return full;
}

}  // namespace pgq
