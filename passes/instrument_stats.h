#pragma once
// Stage (i) instrumentation. Matches: every matmul. Rewrites: adds a quant_stats node
// on each of its two inputs (and on its result with `outputs`) that quantizes the
// tensor in each candidate format (`formats`, plus `gradient_formats` for a gradient
// operand) along the operand's non-contracting dims and returns SQNR, absmax, mean
// square, zero and underflow fractions per format. A tensor read the same way by
// several GEMMs (x feeding q, k and v) gets one node, listing every GEMM operand it
// describes in `uses`; the nodes take the seeds `seed`, `seed`+1, ... in order. The
// nodes become graph outputs and feed nothing, so training numerics do not change. Run
// tag_metadata first (it supplies labels and roles). Reports a change when it added
// any node; a graph that already has its statistics nodes is left alone.
#include <cstdint>
#include <string>
#include <vector>

#include "passes/pass.h"
#include "passes/pass_options.h"

namespace pgq {

struct InstrumentStatsOptions {
  // Every operand is profiled in `formats`; gradient operands also in
  // `gradient_formats` (stochastic rounding is what backward GEMMs use for gradients).
  std::vector<std::string> formats = {"int8:channel:rtn"};
  std::vector<std::string> gradient_formats = {"int8:channel:sr"};
  bool outputs = false;  // also profile each GEMM's result
  int64_t seed = 0;      // of the first statistics node (stochastic-rounding formats)
};

class InstrumentStats : public Pass {
 public:
  using Options = InstrumentStatsOptions;
  static constexpr PassOption<Options> kOptions[] = {
      {.key = "formats", .member = &Options::formats, .help = "the formats every GEMM operand is profiled in"},
      {.key = "gradient_formats", .member = &Options::gradient_formats,
       .help = "the formats gradient operands are profiled in as well"},
      {.key = "outputs", .member = &Options::outputs, .help = "also profile each GEMM's result"},
      {.key = "seed", .member = &Options::seed, .help = "the seed of the first statistics node; the next ones count up"},
  };

  explicit InstrumentStats(Options options = {}) : options_(std::move(options)) {}
  std::string_view name() const override { return "instrument_stats"; }
  bool run(Graph& graph, PassContext& ctx) override;

 private:
  Options options_;
};

}  // namespace pgq
