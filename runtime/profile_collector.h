#pragma once
// Aggregates the quant_stats outputs of an instrumented graph over the logged steps
// into a Profile (plan/profile.h): per GEMM operand and format, the mean, min and
// max SQNR; absmax, rms, zero/underflow/non-finite fractions; and from each operand's
// absmax series, how often delayed or predicted scales would have clipped it.
//
// With metrics (ProfileRun::metrics, `--profile-metrics`) also: the bias-aware SQNR per
// operand and format (quant_stats with `bias`); per GEMM and format pair the SQNR of
// its result computed from quantized operands (the error_stats outputs), mean and min
// over the steps; and each GEMM's reach, from the graph's dataflow: the weight-gradient
// GEMMs its result flows into (statistics nodes and the quantized copies they read
// aside), as a fraction of all weight-gradient GEMMs' output elements (`reach`), and of
// their squared norms, output elements x rms^2 (`gradient_reach`, when the results'
// statistics were logged). The embeddings' gradients (scatter-adds) count as weight
// gradients there, their norms from their own statistics.
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "plan/profile.h"
#include "plan/scaling_strategies.h"
#include "runtime/collectives.h"
#include "runtime/executor.h"

namespace pgq {

class ProfileCollector {
 public:
  // `graph` has been through tag_metadata and instrument_stats; it must outlive the
  // collector. Delayed scaling is measured with an amax history of `amax_history` steps.
  explicit ProfileCollector(const Graph& graph, int64_t amax_history = kDefaultAmaxHistory);

  // Reads the statistics outputs after one run of `executor` (which runs `graph`).
  // `update` bounds the optimizer step that follows the run; the profile has predicted
  // weight scales only when every step gave one.
  void add(const Executor& executor, std::optional<WeightStepBound> update = std::nullopt);
  int64_t steps() const { return steps_; }
  // The profile so far; `run` describes the run that produced it. With `job`, every
  // process of the job calls it and each gets the statistics of all of them: the
  // operands of every replica's batch, and of every device's part of a split operand
  // as that device quantizes it (its own scales).
  Profile profile(ProfileRun run, Collectives* job = nullptr) const;

 private:
  struct Accumulator {
    double sqnr_sum = 0, sqnr_min = 0, sqnr_max = 0, mse_sum = 0, underflow_sum = 0, clipped_sum = 0;
    double bias_sqnr_sum = 0;
  };
  struct StatsOutput {
    size_t output_index;
    const Node* node;
    std::vector<Accumulator> per_format;
    double absmax_max = 0, absmax_sum = 0, rms_sum = 0, zero_sum = 0, nonfinite_sum = 0;
    std::vector<double> absmax_series = {};  // one per step
  };
  // An error_stats output: its columns (ir/quant.h, ErrorStatField) at each step.
  struct ErrorOutput {
    size_t output_index;
    const Node* node;
    std::vector<double> sqnr = {}, mean_square = {}, mse = {};
  };
  // An error_stats output over every process's steps.
  struct OutputError {
    double sqnr_sum = 0, sqnr_min = 0;
  };

  std::vector<StatsOutput> combined(Collectives& job) const;
  // Each error output's SQNR summed and minimized over the steps of every process. Under
  // tensor parallelism each device compares its own part of the GEMM's result (a
  // column of a split result, or its summand of a partial one): a step's SQNR is that of
  // the devices' parts together, the sums of their mean squares and of their mses (the
  // parts have equal sizes). The data-parallel replicas' steps count separately.
  std::vector<OutputError> outputErrors(Collectives* job) const;
  // Reach and gradient reach of every profiled GEMM (`gemms`, its matmul nodes beside);
  // `scatter_rms`: the rms of each embedding-gradient scatter-add whose result was
  // profiled (gradient reach needs every one).
  void fillReach(std::vector<GemmProfile>& gemms, const std::vector<const Node*>& nodes,
                 const std::unordered_map<const Node*, double>& scatter_rms) const;
  // The scaling strategies of each output (none before 2 steps); `job` combines the
  // tensor-parallel devices.
  std::vector<std::optional<ScalingStats>> scalingOf(const std::vector<StatsOutput>& outputs, Collectives* job) const;

  const Graph& graph_;
  const int64_t amax_history_;
  std::vector<StatsOutput> outputs_;
  std::vector<ErrorOutput> errors_;
  std::vector<WeightStepBound> updates_;  // one per step while every step gave one
  bool every_step_updated_ = true;
  int64_t steps_ = 0;
};

}  // namespace pgq
