#pragma once
// Stage (iii) estimate. Matches: every matmul and qmatmul tagged by tag_metadata (not
// stage (i)'s quantized copies, ir/analysis.h isMeasuredOnly).
// Rewrites: sets `est_speedup`, the roofline estimate (plan/hardware.h) of how much
// faster the GEMM runs in int8 on the hardware model, quantization traffic included,
// at its per-device shape; gradient operands are costed with the stochastic-rounding
// quantizer. It only annotates: whether an estimate is worth int8 is the recipe
// generator's decision (plan/recipe_generator.h, the policy's min_speedup), and
// quantize_gemms applies a recipe as written. Reports a change when any estimate was
// added or changed (a second run reports none).
#include <optional>
#include <span>

#include "passes/pass.h"
#include "passes/pass_options.h"

namespace pgq {

struct EstimateSpeedupOptions {
  std::optional<HardwareModel> hardware;  // required
};

class EstimateSpeedup : public Pass {
 public:
  using Options = EstimateSpeedupOptions;
  static constexpr PassOption<Options> kOptions[] = {
      {.key = "hardware", .member = &Options::hardware, .help = "the hardware model to estimate on", .required = true},
  };

  // Throws pgq::Error without a hardware model.
  explicit EstimateSpeedup(Options options);
  std::string_view name() const override { return "estimate_speedup"; }
  bool run(Graph& graph, PassContext& ctx) override;

 private:
  HardwareModel hardware_;
};

}  // namespace pgq
