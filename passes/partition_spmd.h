#pragma once
// SPMD partitioning (in the spirit of XLA's SPMD partitioner): rewrites a graph whose
// values carry tensor-parallel `split = [dim, T]` annotations (propagate_sharding) into
// the graph ONE device runs, T > 1. Every device runs the same graph on its own part.
//
// Each value gets a layout on the device: replicated (whole), split (its part along
// `dim`, the annotation's), or partial (a whole-shaped value of which the devices hold
// summands: a GEMM contracting over a split dim). The pass copies the graph in
// dataflow order, giving each node the local shape of its layout, and inserts a
// collective over group `tp` where a node needs its operand in another layout:
//   partial -> replicated   all_reduce(sum)        (row-parallel out/down, dgrads)
//   partial -> split        reduce_scatter
//   replicated -> split     shard                  (a local slice; no traffic)
//   split -> replicated     all_gather
// Partial values flow through ops that are linear in them (add and sub of two partial
// values; neg; mul and div by a replicated value; reshape, transpose, broadcast,
// reduce_sum, convert) and are reduced once, where something else reads them: a norm's
// input gradient is the sum of its q, k and v dgrads, reduced by one all_reduce, as
// Megatron's column-parallel input does. An output keeps its value's layout (a split
// parameter's gradient stays split, like the parameter), except a partial one, which
// is reduced.
//
// Parameters and inputs keep their names (the runtime binds them by name) and get
// their local types. Statistics and quantization ops compute on the local values: a
// device quantizes its part with its own scales, as it would run. Does nothing when
// no value is split over more than one device; refuses (pgq::Error) annotations over
// different device counts, and a split that does not divide its dim, naming the value.
#include "passes/pass.h"

namespace pgq {

class PartitionSpmd : public Pass {
 public:
  std::string_view name() const override { return "partition_spmd"; }
  bool run(Graph& graph, PassContext& ctx) override;
};

// The tensor-parallel device count of a graph's `split` annotations (1 when none).
int64_t tensorParallelDevices(const Graph& graph);

}  // namespace pgq
