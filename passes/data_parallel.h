#pragma once
// Data parallelism: each of D replicas runs the graph on its batch/D rows of the global
// batch. Matches: every output of the graph but statistics (quant_stats and error_stats
// rows, which the profile gathers from every replica itself). Rewrites: the output becomes its
// all_reduce(mean) over group `dp`, so the loss is the mean over the global batch and
// each gradient the gradient of that loss, on every replica, and the optimizer steps
// identically everywhere. Run it last: nothing of the graph reads the averaged values.
// With one replica the collective copies.
#include "passes/pass.h"

namespace pgq {

class DataParallel : public Pass {
 public:
  std::string_view name() const override { return "data_parallel"; }
  bool run(Graph& graph, PassContext& ctx) override;
};

}  // namespace pgq
