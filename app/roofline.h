#pragma once
// Stage (ii) on paper: what the roofline would keep in high precision for a model split
// over T tensor-parallel devices on a hardware model, without running anything. The
// training graph is built and partitioned as training would (passes/partition_spmd.h);
// every GEMM is estimated at its per-device shape, and every tensor-parallel
// collective on the hardware model's interconnect. `F+B` here means every GEMM whose
// estimated int8 speedup reaches `min_speedup` runs in int8 (gradients with stochastic
// rounding), whatever its SQNR: the roofline's part of the decision only.
#include <cstdint>
#include <string>
#include <vector>

#include "frontend/model_config.h"
#include "passes/training_pipeline.h"
#include "plan/hardware.h"

namespace pgq {

struct RooflineRow {
  std::string name;  // the GEMM's label without its layer ("attn/q", "get_logits")
  GemmDirection direction = GemmDirection::kFwd;
  ShardingKind sharding = ShardingKind::kReplicated;
  std::vector<int64_t> gemm_shape, device_shape;  // [batch, M, K, N]
  int count = 0;                                  // GEMMs of the model with this row
  double high_precision_us = 0, int8_us = 0;      // one of them, per device
  bool int8 = false;
  double speedup() const { return high_precision_us / int8_us; }
};

struct RooflineReport {
  std::string model, hardware;
  int64_t devices = 1;
  Precision precision = Precision::kF32;
  double min_speedup = 1.0;
  std::vector<RooflineRow> rows;
  int gemms = 0, int8_gemms = 0;
  double gemm_us = 0;        // every GEMM in high precision
  double gemm_mixed_us = 0;  // the int8 ones in int8
  int collectives = 0;
  double collective_bytes = 0;  // per device, moved over the interconnect
  double collective_us = 0;
  // GEMMs and tensor-parallel collectives (the rest of a step is not modelled).
  double stepSpeedup() const { return (gemm_us + collective_us) / (gemm_mixed_us + collective_us); }
};

RooflineReport analyzeRoofline(const ModelConfig& model, const HardwareModel& hw, Precision precision,
                               double min_speedup);
std::string rooflineText(const RooflineReport& report);

}  // namespace pgq
