#pragma once
// Stage (i) metadata. Matches: every matmul and qmatmul but the quantized copies stage
// (i) measures output errors with (ir/analysis.h, isMeasuredOnly). Rewrites: sets, from the
// graph's structure and attributes alone (never from label text),
//   label      the stable name (kept when present; else the node name),
//   roles      weight / activation / gradient of each operand (kept when present; else
//              a parameter seen through layout ops is a weight, a value computed from
//              the loss gradient a gradient, anything else an activation),
//   direction  kept when present; else fwd, or for a backward GEMM (`grad_of` names
//              its forward GEMM, `wrt` the operand it differentiates) bwd_wgrad when
//              that operand is a weight and bwd_dgrad otherwise,
//   layer      kept when present (model builders set it on forward GEMMs); else the
//              forward GEMM's for a backward GEMM, and -1 for any other,
//   gemm_shape [batch, M, K, N], flops, bytes (operands + result at their dtypes),
//   sharding, devices, device_shape: Megatron tensor parallelism from the operands'
//              `split` annotations (run propagate_sharding first): a weight split along
//              its output dim is column-parallel, along its input dim row-parallel, and
//              operands split along the same batch dim (attention heads) split heads,
//              over the annotation's devices; a backward GEMM shares its forward GEMM's
//              kind and splits the dim the forward split dim becomes. A split that does
//              not divide the dim evenly, or a GEMM no split reaches, is replicated over
//              the graph's most devices.
// Reports a change when any attribute was added or changed (a second run reports none).
#include "passes/pass.h"

namespace pgq {

class TagMetadata : public Pass {
 public:
  std::string_view name() const override { return "tag_metadata"; }
  bool run(Graph& graph, PassContext& ctx) override;
};

}  // namespace pgq
