#pragma once
// A pass rewrites a graph in place and says whether it changed anything
// (XLA's HloPassInterface). Passes read their inputs (recipe, hardware model, ...)
// from the PassContext, so every pass can be created by name from the registry.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace pgq {

struct HardwareModel;
struct Recipe;

struct PassContext {
  // Verify the graph at the start of a pipeline and after every pass that changed it.
  bool verify = true;

  // tag_metadata: tensor-parallel degree the sharding annotations assume.
  int64_t tensor_parallel = 1;

  // instrument_stats: the formats to profile. Every operand gets `stat_formats`;
  // gradient operands also get `gradient_stat_formats` (stochastic rounding is what
  // backward GEMMs use for gradients). The runtime fills these from the CPU's exact
  // int8 formats (the 7-bit variant without VNNI).
  std::vector<std::string> stat_formats = {"int8:channel:rtn"};
  std::vector<std::string> gradient_stat_formats = {"int8:channel:sr"};
  bool stats_on_outputs = false;  // also profile each GEMM's result
  int64_t stats_seed = 0;

  // roofline_filter: the hardware to estimate on (none: the pass does nothing) and the
  // speedup below which int8 is not worth it.
  const HardwareModel* hardware = nullptr;
  double min_speedup = 1.05;

  // quantize_gemms: the decisions to apply, and the base of the stochastic-rounding
  // streams of the quantize nodes it creates.
  const Recipe* recipe = nullptr;
  int64_t sr_seed = 0;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  // Returns true only when the graph changed.
  virtual bool run(Graph& graph, PassContext& ctx) = 0;
};

}  // namespace pgq
