#include "passes/training_pipeline.h"

#include "passes/bf16_gemms.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/estimate_speedup.h"
#include "passes/fuse_decomposed.h"
#include "passes/fuse_softmax.h"
#include "passes/fuse_swiglu.h"
#include "passes/data_parallel.h"
#include "passes/instrument_stats.h"
#include "passes/partition_spmd.h"
#include "passes/propagate_sharding.h"
#include "passes/quantize_gemms.h"
#include "passes/tag_metadata.h"

namespace pgq {

std::unique_ptr<Pipeline> buildForwardPipeline() {
  auto pipeline = std::make_unique<Pipeline>("forward");
  pipeline->add(std::make_unique<FuseDecomposed>());
  pipeline->add(std::make_unique<FuseSoftmax>());
  pipeline->add(std::make_unique<FuseSwiglu>());
  pipeline->add(std::make_unique<DeadCodeElimination>());
  return pipeline;
}

std::unique_ptr<Pipeline> buildTrainingPipeline(const TrainingPipelineOptions& options) {
  auto pipeline = std::make_unique<Pipeline>("training");
  if (options.precision == Precision::kBf16) pipeline->add(std::make_unique<Bf16Gemms>());
  pipeline->add(std::make_unique<CommonSubexpressionElimination>());
  pipeline->add(std::make_unique<DeadCodeElimination>());
  pipeline->add(std::make_unique<PropagateSharding>());
  pipeline->add(std::make_unique<TagMetadata>());
  pipeline->add(std::make_unique<PartitionSpmd>());
  const auto seed = static_cast<int64_t>(options.seed);
  if (options.profile) {
    pipeline->add(std::make_unique<InstrumentStats>(InstrumentStatsOptions{
        .formats = options.profile->formats,
        .gradient_formats = options.profile->gradient_formats,
        .outputs = options.profile->outputs,
        .bias = options.profile->metrics,
        .output_pairs = options.profile->metrics ? options.profile->output_pairs : std::vector<FormatPair>{},
        .seed = seed,
    }));
  }
  if (options.hardware) pipeline->add(std::make_unique<EstimateSpeedup>(EstimateSpeedupOptions{options.hardware}));
  if (options.recipe) {
    // The stochastic-rounding streams start at seed * 7919 + 17, apart from the
    // statistics nodes' seeds (seed, seed + 1, ...); a replica's 2^32 further per replica
    // (a graph has far fewer nodes, each taking the next stream).
    const auto streams = static_cast<int64_t>(seed * 7919 + 17 + (static_cast<uint64_t>(options.replica) << 32));
    pipeline->add(std::make_unique<QuantizeGemms>(QuantizeGemmsOptions{.recipe = options.recipe, .seed = streams}));
    pipeline->add(std::make_unique<CommonSubexpressionElimination>());
    pipeline->add(std::make_unique<DeadCodeElimination>());
  }
  if (options.data_parallel) pipeline->add(std::make_unique<DataParallel>());
  return pipeline;
}

}  // namespace pgq
