#pragma once
// A pass rewrites a graph in place and says whether it changed anything
// (XLA's HloPassInterface). Passes read their inputs (recipe, hardware model, ...)
// from the PassContext, so every pass can be created by name from the registry.
#include <string_view>

#include "ir/graph.h"

namespace pgq {

struct PassContext {
  // Verify the graph at the start of a pipeline and after every pass that changed it.
  bool verify = true;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  // Returns true only when the graph changed.
  virtual bool run(Graph& graph, PassContext& ctx) = 0;
};

}  // namespace pgq
