#pragma once
// The pipelines every training graph goes through. On the forward graph, before
// autodiff (so the backward is derived from the fused ops):
//
//   fuse_decomposed, fuse_softmax, fuse_swiglu, dce
//
// and on the training graph, built from typed options:
//
//   [bf16_gemms,] cse, dce, propagate_sharding, tag_metadata, partition_spmd
//   [, instrument_stats] [, estimate_speedup]
//   [, quantize_gemms, cse, dce] [, data_parallel]
//
// tag_metadata records every GEMM's global and per-device shapes before
// partition_spmd (a no-op unless the model is split over several devices) rewrites the
// graph into the one each device runs; statistics and int8 GEMMs are then built on the
// device's own parts, with its own scales, as they run. data_parallel when the job has
// several data-parallel replicas.
// bf16_gemms when GEMMs run in bf16; instrument_stats for stage (i)'s statistics nodes;
// estimate_speedup with a hardware model; quantize_gemms with a recipe (stage iii),
// then cse and dce to merge and drop what the rewrite leaves behind. The seeds of the
// statistics nodes and of the stochastic-rounding streams derive from the model's
// seed here, and only here.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "passes/pass_options.h"
#include "passes/pipeline.h"
#include "plan/hardware.h"
#include "plan/profile_request.h"
#include "plan/recipe.h"

namespace pgq {

// The precision GEMMs run in before any int8 rewrite.
enum class Precision { kF32, kBf16 };

struct TrainingPipelineOptions {
  Precision precision = Precision::kF32;
  std::optional<ProfileRequest> profile;  // stage (i): add statistics nodes
  std::optional<HardwareModel> hardware;  // annotate roofline speedup estimates
  std::optional<Recipe> recipe;           // stage (iii): rewrite to int8 GEMMs
  uint64_t seed = 0;                      // the model's seed
  bool data_parallel = false;             // average loss and gradients over replicas
  // This process's data-parallel replica (0 in one process). Its stochastic-rounding
  // streams are its own: replicas rounded element i of their own gradients with the same
  // noise (errors correlated ~0.5), so averaging them removed less noise than it should.
  // The ranks of one tensor-parallel group share the streams (the tensors they hold
  // replicated must round alike).
  int64_t replica = 0;
};

std::unique_ptr<Pipeline> buildForwardPipeline();
std::unique_ptr<Pipeline> buildTrainingPipeline(const TrainingPipelineOptions& options);

}  // namespace pgq
