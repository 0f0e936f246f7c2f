#include "passes/quantize_gemms.h"

#include <map>

#include "passes/quantized_gemm.h"
#include "plan/recipe.h"
#include "support/errors.h"

namespace pgq {

bool QuantizeGemms::run(Graph& graph, PassContext&) {
  if (!options_.recipe) throw Error("quantize_gemms needs a recipe (quantize_gemms{recipe=R.yaml})");
  std::map<std::string, GemmDecision> decisions;
  for (auto& [label, d] : resolveRecipe(*options_.recipe, graph)) decisions.emplace(label, std::move(d));
  QuantizedGemmBuilder builder(graph, options_.seed);
  bool changed = false;
  for (Node* node : graph.postOrder()) {
    if (node->op() != Op::kMatMul) continue;
    auto it = decisions.find(node->attrs().getStringOr(AttrKey::kLabel, ""));
    if (it == decisions.end() || it->second.decision != Decision::kQuantize) continue;
    // The quantized GEMM takes the matmul's tags (label, roles, shapes, ...) and its place.
    graph.replaceAllUsesWith(node, builder.build(node, it->second, node->attrs(), node->name()));
    changed = true;
  }
  return changed;
}

}  // namespace pgq
