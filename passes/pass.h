#pragma once
// A pass rewrites a graph in place and says whether it changed anything
// (XLA's HloPassInterface). A pass owns its options: it takes them in its
// constructor, and the registry makes them from text (passes/pass_options.h), so
// every pass can be created by name. The context carries only what the pipeline
// itself needs.
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
