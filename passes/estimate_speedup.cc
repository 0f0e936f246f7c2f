#include "passes/estimate_speedup.h"

#include "ir/analysis.h"
#include "plan/hardware.h"
#include "support/errors.h"

namespace pgq {

EstimateSpeedup::EstimateSpeedup(Options options) {
  if (!options.hardware) throw Error("estimate_speedup needs a hardware model (estimate_speedup{hardware=...})");
  hardware_ = std::move(*options.hardware);
}

bool EstimateSpeedup::run(Graph& graph, PassContext&) {
  bool changed = false;
  for (Node* node : graph.postOrder()) {
    if ((node->op() != Op::kMatMul && node->op() != Op::kQMatMul) || isMeasuredOnly(graph, *node)) continue;
    Attrs& a = node->attrs();
    if (!a.has(AttrKey::kDeviceShape))
      throw Error(fmt::format("estimate_speedup: GEMM %{} has no device_shape; run tag_metadata first", node->name()));
    // Gradient operands are quantized with stochastic rounding, the slower quantizer.
    const OperandRoles& roles = a.getRoles(AttrKey::kRoles);
    DType dtype = node->op() == Op::kMatMul ? node->operand(0)->dtype() : DType::kF32;
    double speedup = estimateGemm(hardware_, a.getInts(AttrKey::kDeviceShape), dtype,
                                  roles[0] == OperandRole::kGradient, roles[1] == OperandRole::kGradient)
                         .speedup();
    if (a.has(AttrKey::kEstSpeedup) && a.getFloat(AttrKey::kEstSpeedup) == speedup) continue;
    a.set(AttrKey::kEstSpeedup, speedup);
    changed = true;
  }
  return changed;
}

}  // namespace pgq
