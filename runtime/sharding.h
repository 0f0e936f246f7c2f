#pragma once
// Moving parameters between their global form (checkpoints, initialization) and the
// part a tensor-parallel device holds (`split = [dim, T]` on the partitioned graph's
// parameter): device i of T holds the i-th of T equal blocks along dim.
#include <cstdint>
#include <optional>

#include "ir/node.h"
#include "runtime/collectives.h"
#include "runtime/tensor.h"

namespace pgq {

// The split of a parameter of a partitioned graph over more than one device, if any.
struct ParamSplit {
  int64_t dim = 0;
  int64_t devices = 1;
};
std::optional<ParamSplit> paramSplit(const Node& param);

// The global type of a partitioned graph's parameter (its local type when not split).
TensorType globalType(const Node& param);

// Block `index` of `parts` of `full` along `dim`.
Tensor shardOf(const Tensor& full, int64_t dim, int64_t index, int64_t parts);

// The whole tensor from each tensor-parallel device's block along `dim` (every device
// calls it; an all_gather over group tp).
Tensor gatherShards(const Tensor& local, int64_t dim, Collectives& comm);

}  // namespace pgq
