#pragma once
// Tensor-parallel sharding of an imported model: a YAML file of rules, each a regular
// expression (RE2, matching a whole parameter name, as `pgq import` lists them: the
// PyTorch module paths) and the dim of that parameter, in PyTorch's layout, split over
// the devices:
//
//   rules:
//     - {pattern: 'blocks\.[0-9]+\.attn\.[qkv]\.weight', dim: 0}   # column-parallel
//     - {pattern: 'blocks\.[0-9]+\.attn\.o\.weight', dim: 1}       # row-parallel
//
// The first rule that matches a parameter decides; parameters no rule matches stay
// whole on every device. The rules feed the same passes as the built models'
// annotations (propagate_sharding, partition_spmd), so any split of a GEMM weight or an
// embedding table is correct; a Megatron-style split (column-parallel, then
// row-parallel) is the one that needs collectives only where Megatron has them. Other
// parameters (norm gains, biases) are refused: they stay whole.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ir/node.h"
#include "support/label_pattern.h"

namespace pgq {

struct ShardingRule {
  LabelPattern pattern;
  int64_t dim = 0;
  int line = 0;
};

struct ShardingRules {
  std::string path;
  std::vector<ShardingRule> rules;
};

// Throws pgq::Error naming the file, line and field for a malformed file.
ShardingRules loadShardingRules(const std::string& path);

// Sets `split = [dim, devices]` on every parameter a rule matches. Throws pgq::Error
// naming the file and the rule's line when a rule matches no parameter, names a dim the
// parameter lacks, the dim does not split into `devices` equal parts, or the parameter
// is read other than as a GEMM operand or an embedding table (a norm gain, a bias: those
// stay whole).
void applyShardingRules(const ShardingRules& rules, std::span<Node* const> params, int64_t devices);

}  // namespace pgq
