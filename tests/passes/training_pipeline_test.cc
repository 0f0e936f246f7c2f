#include <algorithm>

#include <gtest/gtest.h>

#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "ir/printer.h"
#include "passes/training_pipeline.h"

namespace pgq {
namespace {

QuantFormat qf(const char* text) { return QuantFormat::parse(text); }

using Names = std::vector<std::string_view>;

Recipe everyGemmInInt8() {
  return parseRecipe(R"(gemms:
  - {match: ".*", decision: int8, lhs_format: "int8:channel:rtn", rhs_format: "int7:channel:sr"}
)",
                     "r.yaml");
}

TEST(TrainingPipeline, FusesTheForwardGraphFirst) {
  EXPECT_EQ(buildForwardPipeline()->passNames(), (Names{"fuse_decomposed", "fuse_softmax", "fuse_swiglu", "dce"}));
}

TEST(TrainingPipeline, HasTheStagesTheOptionsAskFor) {
  TrainingPipelineOptions o;
  EXPECT_EQ(buildTrainingPipeline(o)->passNames(),
            (Names{"cse", "dce", "propagate_sharding", "tag_metadata", "partition_spmd"}));
  o.precision = Precision::kBf16;
  o.profile = ProfileRequest{{qf("int8:channel:rtn")}, {qf("int8:channel:sr")}, false};
  EXPECT_EQ(buildTrainingPipeline(o)->passNames(), (Names{"bf16_gemms", "cse", "dce", "propagate_sharding", "tag_metadata", "partition_spmd",
                   "instrument_stats"}));
  o.precision = Precision::kF32;
  o.profile.reset();
  o.hardware = loadHardwareModel("epyc-zen3-2c");
  o.recipe = everyGemmInInt8();
  EXPECT_EQ(buildTrainingPipeline(o)->passNames(),
            (Names{"cse", "dce", "propagate_sharding", "tag_metadata", "partition_spmd", "estimate_speedup",
                   "quantize_gemms", "cse", "dce"}));
  o.data_parallel = true;
  EXPECT_EQ(buildTrainingPipeline(o)->passNames().back(), "data_parallel");
}

// The seeds derive from the model's: statistics nodes count up from it, the
// stochastic-rounding streams from seed * 7919 + 17 (+ 2^32 per data-parallel replica).
TEST(TrainingPipeline, DerivesTheSeedsFromTheModelSeed) {
  auto seedsOf = [](const Graph& g, Op op) {
    std::vector<int64_t> seeds;
    for (const Node* n : g.nodes())
      if (n->op() == op) seeds.push_back(n->attrs().getInt(AttrKey::kSeed));
    std::sort(seeds.begin(), seeds.end());
    return seeds;
  };
  TrainingPipelineOptions o;
  o.seed = 5;
  PassContext ctx;

  TransformerGraph profiled = buildTransformer(loadModelConfig("tiny"));
  appendBackward(*profiled.graph, profiled.loss, profiled.params);
  o.profile = ProfileRequest{{qf("int8:channel:rtn")}, {qf("int8:channel:sr")}, false};
  buildTrainingPipeline(o)->run(*profiled.graph, ctx);
  std::vector<int64_t> stats = seedsOf(*profiled.graph, Op::kQuantStats);
  ASSERT_FALSE(stats.empty());
  EXPECT_EQ(stats.front(), 5);
  EXPECT_EQ(stats.back(), 5 + static_cast<int64_t>(stats.size()) - 1);

  // With the metrics' output errors, the quantized copies' streams continue the count.
  TransformerGraph measured = buildTransformer(loadModelConfig("tiny"));
  appendBackward(*measured.graph, measured.loss, measured.params);
  o.profile->metrics = true;
  o.profile->output_pairs = {{qf("int8:channel:rtn"), qf("int8:channel:sr")}};
  buildTrainingPipeline(o)->run(*measured.graph, ctx);
  EXPECT_EQ(seedsOf(*measured.graph, Op::kQuantStats), stats);
  // Round-to-nearest operands take seed 0; the stochastic ones (gradients) keep the
  // stream their place in the count gives them, after the statistics', each its own.
  std::vector<int64_t> copies = seedsOf(*measured.graph, Op::kQuantize);
  const auto n = static_cast<int64_t>(copies.size());
  std::erase(copies, 0);
  ASSERT_FALSE(copies.empty());
  EXPECT_GT(copies.front(), stats.back());
  EXPECT_LE(copies.back(), stats.back() + n);
  EXPECT_EQ(std::adjacent_find(copies.begin(), copies.end()), copies.end());

  TransformerGraph quantized = buildTransformer(loadModelConfig("tiny"));
  appendBackward(*quantized.graph, quantized.loss, quantized.params);
  o.profile.reset();
  o.recipe = everyGemmInInt8();
  buildTrainingPipeline(o)->run(*quantized.graph, ctx);
  std::vector<int64_t> sr = seedsOf(*quantized.graph, Op::kQuantize);
  std::erase(sr, 0);  // the lhs round to nearest
  ASSERT_FALSE(sr.empty());
  EXPECT_EQ(sr.front(), 5 * 7919 + 17 + 1);

  // Data-parallel replica 1 rounds with streams of its own, 2^32 on: every replica drew
  // the same noise for element i of its own gradient (session 17's hunt).
  TransformerGraph replica = buildTransformer(loadModelConfig("tiny"));
  appendBackward(*replica.graph, replica.loss, replica.params);
  o.replica = 1;
  buildTrainingPipeline(o)->run(*replica.graph, ctx);
  std::vector<int64_t> other = seedsOf(*replica.graph, Op::kQuantize);
  std::erase(other, 0);
  ASSERT_EQ(other.size(), sr.size());
  for (size_t i = 0; i < sr.size(); ++i) EXPECT_EQ(other[i], sr[i] + (int64_t{1} << 32)) << i;
}

}  // namespace
}  // namespace pgq
