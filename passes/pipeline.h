#pragma once
// A pipeline is itself a pass: it runs its passes in order, verifying the graph at
// the start and after each pass that reported a change. A pass that changes the
// graph while reporting no change is caught in verifying mode: the pipeline
// compares the printed graph before and after and fails loudly.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "passes/pass.h"

namespace pgq {

class Pipeline : public Pass {
 public:
  explicit Pipeline(std::string name = "pipeline") : name_(std::move(name)) {}

  void add(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  size_t size() const { return passes_.size(); }
  std::vector<std::string_view> passNames() const;

  std::string_view name() const override { return name_; }
  bool run(Graph& graph, PassContext& ctx) override;

 private:
  std::string name_;
  std::vector<std::unique_ptr<Pass>> passes_;
};

// Builds a pipeline from a comma-separated list of registered passes, each with its
// options in braces: "tag_metadata,quantize_gemms{recipe=r.yaml,seed=3}" (a comma
// inside braces or brackets belongs to the options; passes/pass_options.h). Throws
// pgq::Error naming an unknown pass (listing the known ones) or a bad option (naming
// the pass, the key and the pass's keys), before any pass runs.
std::unique_ptr<Pipeline> parsePipeline(std::string_view spec);

}  // namespace pgq
