#include "app/roofline.h"

#include <map>
#include <optional>

#include <fmt/format.h>

#include "ir/gemm_meta.h"
#include "passes/compile.h"
#include "plan/profile.h"

namespace pgq {
namespace {

std::string withoutLayer(const std::string& label) {
  if (label.rfind("layer", 0) != 0) return label;
  size_t slash = label.find('/');
  return slash == std::string::npos ? label : label.substr(slash + 1);
}

double bytesOf(const Node& n) { return static_cast<double>(n.shape().numElements() * dtypeSize(n.dtype())); }

}  // namespace

RooflineReport analyzeRoofline(const ModelConfig& model, const HardwareModel& hw, Precision precision,
                               double min_speedup) {
  TrainingPipelineOptions pipeline;
  pipeline.precision = precision;
  const TransformerGraph t = compileModel(model, {.pipeline = pipeline});  // shapes only

  RooflineReport r;
  r.model = model.name;
  r.hardware = hw.name;
  r.devices = model.tensor_parallel;
  r.precision = precision;
  r.min_speedup = min_speedup;
  const DType dtype = precision == Precision::kBf16 ? DType::kBF16 : DType::kF32;
  // As `pgq recipe` estimates F+B: int8 per channel, round to nearest (stochastic
  // rounding, charged before, is F+B_SR's), and where the hardware casts each tensor
  // once (cast_once), each GEMM paying its share of the cast of a tensor several read.
  std::map<const Node*, int> readers;
  for (const Node* n : t.graph->postOrder())
    if (n->op() == Op::kMatMul)
      for (int i = 0; i < 2; ++i) readers[n->operand(i)] += 1;
  const QuantFormat int8 = perChannelFormat(8, Rounding::kNearest);
  auto share = [&](const Node* operand) { return hw.cast_once ? 1.0 / std::max(1, readers[operand]) : 1.0; };
  std::map<std::pair<std::string, int>, size_t> row_of;
  for (const Node* n : t.graph->postOrder()) {
    if (n->op() == Op::kMatMul) {
      const Attrs& a = n->attrs();
      const OperandRoles& roles = a.getRoles(AttrKey::kRoles);
      GemmEstimate e = estimateGemm(hw, a.getInts(AttrKey::kDeviceShape), dtype, int8, int8, share(n->operand(0)),
                                    share(n->operand(1)));
      // Attention's batched GEMMs as shares of one flash kernel where the hardware fuses it.
      const std::optional<double> fused =
          fusedAttentionUs(hw, a.getInts(AttrKey::kDeviceShape), a.getDirection(AttrKey::kDirection), roles);
      if (fused) e = {*fused, *fused, 0.0};
      // A flash kernel's share stays in high precision: its 1.00x is no decision to quantize.
      const bool int8 = !fused && e.speedup() >= min_speedup;
      r.gemms += 1;
      r.int8_gemms += int8;
      r.gemm_us += e.high_precision_us;
      r.gemm_mixed_us += int8 ? e.int8Us() : e.high_precision_us;
      const GemmDirection direction = a.getDirection(AttrKey::kDirection);
      auto key = std::pair(withoutLayer(a.getString(AttrKey::kLabel)), static_cast<int>(direction));
      auto [it, fresh] = row_of.emplace(key, r.rows.size());
      if (fresh)
        r.rows.push_back({key.first, direction, a.getSharding(AttrKey::kSharding), a.getInts(AttrKey::kGemmShape),
                          a.getInts(AttrKey::kDeviceShape), 0, e.high_precision_us, e.int8Us(), int8});
      r.rows[it->second].count += 1;
    } else if (n->op() == Op::kAllReduce || n->op() == Op::kAllGather || n->op() == Op::kReduceScatter) {
      if (n->attrs().getGroup(AttrKey::kGroup) != DeviceGroup::kTensor) continue;
      CollectiveKind kind = n->op() == Op::kAllReduce   ? CollectiveKind::kAllReduce
                            : n->op() == Op::kAllGather ? CollectiveKind::kAllGather
                                                        : CollectiveKind::kReduceScatter;
      // The whole value: all_gather's result, reduce_scatter's operand.
      double bytes = n->op() == Op::kReduceScatter ? bytesOf(*n->operand(0)) : bytesOf(*n);
      const double t = static_cast<double>(r.devices);
      r.collectives += 1;
      r.collective_bytes += (kind == CollectiveKind::kAllReduce ? 2.0 : 1.0) * (t - 1) / t * bytes;
      r.collective_us += estimateCollectiveUs(hw, kind, bytes, r.devices);
    }
  }
  return r;
}

std::string rooflineText(const RooflineReport& r) {
  std::string out = fmt::format(
      "roofline of {} at tensor parallel {} on {} ({} GEMMs; int8 where the estimate reaches {:.2f}x)\n\n"
      "| GEMM | direction | sharding | x | M,K,N | per device | {} us | int8 us | est. | decision |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n",
      r.model, r.devices, r.hardware, r.precision == Precision::kBf16 ? "bf16" : "f32", r.min_speedup,
      r.precision == Precision::kBf16 ? "bf16" : "f32");
  for (const RooflineRow& row : r.rows)
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {:.1f} | {:.1f} | {:.2f}x | {} |\n", row.name,
                       nameOf(row.direction), nameOf(row.sharding), row.count, gemmShapeText(row.gemm_shape),
                       gemmShapeText(row.device_shape), row.high_precision_us, row.int8_us, row.speedup(),
                       row.int8 ? "int8" : "keep");
  out += fmt::format(
      "\nGEMMs in int8: {} of {}\nper device and step: GEMMs {:.2f} ms -> {:.2f} ms ({:.2f}x); tensor-parallel "
      "collectives: {} moving {:.1f} MB, {:.2f} ms{}\nestimated step speedup of F+B (GEMMs + collectives): {:.2f}x\n",
      r.int8_gemms, r.gemms, r.gemm_us / 1e3, r.gemm_mixed_us / 1e3, r.gemm_us / r.gemm_mixed_us, r.collectives,
      r.collective_bytes / 1e6, r.collective_us / 1e3,
      r.devices > 1 && r.collective_us == 0 ? " (no interconnect in the hardware model)" : "", r.stepSpeedup());
  return out;
}

}  // namespace pgq
