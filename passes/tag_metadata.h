#pragma once
// Stage (i) metadata. Matches: every matmul and qmatmul. Rewrites: sets, from the
// graph alone,
//   label      the stable name (kept when present; else the node name),
//   direction  fwd / bwd_dgrad / bwd_wgrad (kept when present; else from the label's
//              ":dgrad*" / ":wgrad*" suffix),
//   roles      weight / activation / gradient of each operand (kept when present; else
//              a parameter seen through layout ops is a weight, a value computed from
//              a loss gradient is a gradient, anything else an activation),
//   layer      from a "layer<N>/" label prefix, else -1,
//   gemm_shape [batch, M, K, N], flops, bytes (operands + result at their dtypes),
//   sharding, devices, device_shape: Megatron tensor parallelism over
//              `tensor_parallel` devices: q/k/v/up and the logits are column-parallel
//              (weight split along its output dim), out/down row-parallel (split along
//              the input dim), attention scores/av split by heads; backward GEMMs split
//              the dim their forward GEMM's split dim becomes.
// Reports a change when any attribute was added or changed (a second run reports none).
#include <cstdint>

#include "passes/pass.h"
#include "passes/pass_options.h"

namespace pgq {

struct TagMetadataOptions {
  int64_t tensor_parallel = 1;
};

class TagMetadata : public Pass {
 public:
  using Options = TagMetadataOptions;
  static constexpr PassOption<Options> kOptions[] = {
      {.key = "tensor_parallel", .member = &Options::tensor_parallel,
       .help = "the tensor-parallel degree the sharding annotations assume", .min = 1},
  };

  explicit TagMetadata(Options options = {}) : options_(options) {}
  std::string_view name() const override { return "tag_metadata"; }
  bool run(Graph& graph, PassContext& ctx) override;

 private:
  Options options_;
};

}  // namespace pgq
