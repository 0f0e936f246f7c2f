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

  std::string_view name() const override { return name_; }
  bool run(Graph& graph, PassContext& ctx) override;

 private:
  std::string name_;
  std::vector<std::unique_ptr<Pass>> passes_;
};

// Builds a pipeline from a comma-separated list of registered pass names
// ("cse,dce"). Throws pgq::Error naming an unknown pass and listing the known ones.
std::unique_ptr<Pipeline> parsePipeline(std::string_view spec);

}  // namespace pgq
