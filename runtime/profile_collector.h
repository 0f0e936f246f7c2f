#pragma once
// Aggregates the quant_stats outputs of an instrumented graph over the logged steps
// into a Profile (plan/profile.h): per GEMM operand and format, the mean, min and
// max SQNR; absmax, rms, zero/underflow/non-finite fractions.
#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "plan/profile.h"
#include "runtime/collectives.h"
#include "runtime/executor.h"

namespace pgq {

class ProfileCollector {
 public:
  // `graph` has been through tag_metadata and instrument_stats; it must outlive the
  // collector.
  explicit ProfileCollector(const Graph& graph);

  // Reads the statistics outputs after one run of `executor` (which runs `graph`).
  void add(const Executor& executor);
  int64_t steps() const { return steps_; }
  // The profile so far; `run` describes the run that produced it. With `job`, every
  // process of the job calls it and each gets the statistics of all of them: the
  // operands of every replica's batch, and of every device's part of a split operand
  // as that device quantizes it (its own scales).
  Profile profile(ProfileRun run, Collectives* job = nullptr) const;

 private:
  struct Accumulator {
    double sqnr_sum = 0, sqnr_min = 0, sqnr_max = 0, mse_sum = 0, underflow_sum = 0, clipped_sum = 0;
  };
  struct StatsOutput {
    size_t output_index;
    const Node* node;
    std::vector<Accumulator> per_format;
    double absmax_max = 0, absmax_sum = 0, rms_sum = 0, zero_sum = 0, nonfinite_sum = 0;
  };

  std::vector<StatsOutput> combined(Collectives& job) const;

  const Graph& graph_;
  std::vector<StatsOutput> outputs_;
  int64_t steps_ = 0;
};

}  // namespace pgq
