#include "passes/bf16_gemms.h"

#include <unordered_map>

#include "ir/builder.h"

namespace pgq {

bool Bf16Gemms::run(Graph& graph, PassContext&) {
  Builder b(graph);
  std::unordered_map<const Node*, Node*> converted;
  auto bf16Of = [&](Node* value) {
    auto [it, inserted] = converted.try_emplace(value, nullptr);
    if (inserted) it->second = b.convert(value, DType::kBF16, value->name() + ".bf16");
    return it->second;
  };
  bool changed = false;
  for (Node* node : graph.postOrder()) {
    if (node->op() != Op::kMatMul || node->operand(0)->dtype() != DType::kF32) continue;
    Node* gemm = b.create(Op::kMatMul, {bf16Of(node->operand(0)), bf16Of(node->operand(1))},
                          node->attrs(), std::nullopt, node->name() + ".bf16");
    graph.replaceAllUsesWith(node, gemm);
    changed = true;
  }
  return changed;
}

}  // namespace pgq
