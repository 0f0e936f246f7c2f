#pragma once
// Stage (i) instrumentation. Matches: every matmul. Rewrites: adds a quant_stats node
// on each of its two inputs (and on its result with `outputs`) that quantizes the
// tensor in each candidate format (`formats`, plus `gradient_formats` for a gradient
// operand) along the operand's non-contracting dims and returns SQNR, absmax, mean
// square, zero and underflow fractions per format (with `bias`, the bias-aware SQNR
// too). A tensor read the same way by several GEMMs (x feeding q, k and v) gets one
// node, listing every GEMM operand it describes in `uses`; the nodes take the seeds
// `seed`, `seed`+1, ... in order.
//
// With `output_pairs`, for every GEMM and pair (operand format, gradient format): the
// GEMM quantized as quantize_gemms would run it with the pair's gradient format on a
// gradient operand and its operand format on the others (passes/quantized_gemm.h),
// built beside the GEMM from the same operands, and error_stats(GEMM, copy) comparing
// the two results. A pair that gives a GEMM the same two formats as an earlier pair
// (a forward GEMM has no gradient operand) adds nothing. The copies carry no tags
// (label, roles, gemm id): they are no GEMMs of the model (ir/analysis.h,
// isMeasuredOnly); their quantize nodes continue the statistics nodes' seeds. The
// pairs must run exactly where the graph runs: an integer pair too wide for the CPU's
// int8 GEMM is refused by the CPU backend when the graph is compiled (stage (i)'s
// request narrows its pairs to the widths the CPU runs exactly, plan/profile_request.h).
//
// The statistics nodes become graph outputs and feed nothing, so training numerics do
// not change. Run tag_metadata first (it supplies labels and roles). Reports a change
// when it added any node; a graph that already has its statistics nodes is left alone.
#include <cstdint>
#include <string>
#include <vector>

#include "passes/pass.h"
#include "passes/pass_options.h"

namespace pgq {

struct InstrumentStatsOptions {
  // Every operand is profiled in `formats`; gradient operands also in
  // `gradient_formats` (stochastic rounding is what backward GEMMs use for gradients).
  std::vector<QuantFormat> formats = {perChannelFormat(8)};
  std::vector<QuantFormat> gradient_formats = {perChannelFormat(8, Rounding::kStochastic)};
  bool outputs = false;  // also profile each GEMM's result
  bool bias = false;     // also the bias-aware SQNR of every operand and format
  std::vector<FormatPair> output_pairs = {};  // the output errors to measure
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
      {.key = "bias", .member = &Options::bias, .help = "also measure each operand's bias-aware SQNR per format"},
      {.key = "output_pairs", .member = &Options::output_pairs,
       .help = "measure the error of each GEMM's result quantized in these (operand, gradient) format pairs"},
      {.key = "seed", .member = &Options::seed, .help = "the seed of the first statistics node; the next ones count up"},
  };

  explicit InstrumentStats(Options options = {}) : options_(std::move(options)) {}
  std::string_view name() const override { return "instrument_stats"; }
  // Throws pgq::Error for a pair that mixes an integer format with an FP8/MX one.
  bool run(Graph& graph, PassContext& ctx) override;

 private:
  Options options_;
};

}  // namespace pgq
