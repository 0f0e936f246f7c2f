#include "passes/roofline_filter.h"

#include "support/errors.h"
#include "plan/hardware.h"

namespace pgq {

bool rooflineRejects(const Node& gemm, double min_speedup) {
  return gemm.attrs().has(AttrKey::kEstSpeedup) && gemm.attrs().getFloat(AttrKey::kEstSpeedup) < min_speedup;
}

bool RooflineFilter::run(Graph& graph, PassContext& ctx) {
  if (!ctx.hardware) return false;
  bool changed = false;
  for (Node* node : graph.postOrder()) {
    if (node->op() != Op::kMatMul && node->op() != Op::kQMatMul) continue;
    Attrs& a = node->attrs();
    if (!a.has(AttrKey::kDeviceShape))
      throw Error(fmt::format("roofline_filter: GEMM %{} has no device_shape; run tag_metadata first", node->name()));
    // Gradient operands are quantized with stochastic rounding, the slower quantizer.
    const OperandRoles& roles = a.getRoles(AttrKey::kRoles);
    DType dtype = node->op() == Op::kMatMul ? node->operand(0)->dtype() : DType::kF32;
    double speedup = estimateGemm(*ctx.hardware, a.getInts(AttrKey::kDeviceShape), dtype,
                                  roles[0] == OperandRole::kGradient, roles[1] == OperandRole::kGradient)
                         .speedup();
    if (a.has(AttrKey::kEstSpeedup) && a.getFloat(AttrKey::kEstSpeedup) == speedup) continue;
    a.set(AttrKey::kEstSpeedup, speedup);
    changed = true;
  }
  return changed;
}

}  // namespace pgq
