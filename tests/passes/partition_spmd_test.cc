#include <gtest/gtest.h>

#include <map>

#include "frontend/autodiff.h"
#include "frontend/model_config.h"
#include "frontend/transformer.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/data_parallel.h"
#include "passes/partition_spmd.h"
#include "passes/propagate_sharding.h"
#include "passes/training_pipeline.h"
#include "support/errors.h"

namespace pgq {
namespace {

// A Megatron MLP block: column-parallel up, row-parallel down, residual add.
TEST(PartitionSpmd, SplitsAMegatronBlockAndReducesTheRowParallelOutputOnce) {
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[8,16]
  %up = parameter() {split=[1,2]} : f32[16,32]
  %down = parameter() {split=[0,2]} : f32[32,16]
  %h = matmul(%x, %up) {lhs_contract=[1], rhs_contract=[0]} : f32[8,32]
  %a = relu(%h) : f32[8,32]
  %y = matmul(%a, %down) {lhs_contract=[1], rhs_contract=[0]} : f32[8,16]
  %out = add(%x, %y) : f32[8,16]
  return %out
}
)");
  PassContext ctx;
  PropagateSharding().run(*g, ctx);
  EXPECT_TRUE(PartitionSpmd().run(*g, ctx));
  EXPECT_EQ(printGraph(*g), R"(graph @g {
  %x = input() : f32[8,16]
  %up = parameter() {split=[1,2]} : f32[16,16]
  %down = parameter() {split=[0,2]} : f32[16,16]
  %h = matmul(%x, %up) {lhs_contract=[1], rhs_contract=[0], split=[1,2]} : f32[8,16]
  %a = relu(%h) {split=[1,2]} : f32[8,16]
  %y = matmul(%a, %down) {lhs_contract=[1], rhs_contract=[0]} : f32[8,16]
  %y.all_reduce = all_reduce(%y) {group="tp", reduce="sum"} : f32[8,16]
  %out = add(%x, %y.all_reduce) : f32[8,16]
  return %out
}
)");
}

// error_stats compares the same part of its two values on each device: two split the
// same way are compared locally; otherwise both are made whole first. A partial value
// (a row-parallel result) is reduced first.
TEST(PartitionSpmd, ErrorStatsCompareTheSamePartOfBothValues) {
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[8,16]
  %up = parameter() {split=[1,2]} : f32[16,32]
  %down = parameter() {split=[0,2]} : f32[32,16]
  %h = matmul(%x, %up) {lhs_contract=[1], rhs_contract=[0]} : f32[8,32]
  %h2 = matmul(%x, %up) {lhs_contract=[1], rhs_contract=[0]} : f32[8,32]
  %e = error_stats(%h, %h2) {label="up", lhs_format="int8:channel:rtn", rhs_format="int8:channel:rtn"} : f32[3]
  %y = matmul(%h, %down) {lhs_contract=[1], rhs_contract=[0]} : f32[8,16]
  %z = exp(%x) : f32[8,16]
  %f = error_stats(%y, %z) {label="down", lhs_format="int8:channel:rtn", rhs_format="int8:channel:rtn"} : f32[3]
  %w = parameter() {split=[1,2]} : f32[16,16]
  %s = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0]} : f32[8,16]
  %m = error_stats(%s, %z) {label="s", lhs_format="int8:channel:rtn", rhs_format="int8:channel:rtn"} : f32[3]
  return %y, %e, %f, %m
}
)");
  PassContext ctx;
  PropagateSharding().run(*g, ctx);
  EXPECT_TRUE(PartitionSpmd().run(*g, ctx));
  const std::string text = printGraph(*g);
  EXPECT_NE(text.find("%e = error_stats(%h, %h2) {"), std::string::npos) << text;
  EXPECT_NE(text.find("%h2 = matmul(%x, %up) {lhs_contract=[1], rhs_contract=[0], split=[1,2]} : f32[8,16]"),
            std::string::npos) << text;
  EXPECT_NE(text.find("%f = error_stats(%y.all_reduce, %z) {"), std::string::npos) << text;
  EXPECT_NE(text.find("%m = error_stats(%s.all_gather, %z) {"), std::string::npos) << text;
}

// Layout changes: a whole value added to a split one is sliced (shard), a split value
// read whole is gathered, a splat constant just takes the local shape.
TEST(PartitionSpmd, MovesOperandsBetweenLayouts) {
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[4,8]
  %w = parameter() {split=[1,2]} : f32[8,8]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0]} : f32[4,8]
  %c = constant() {value=2.0} : f32[4,8]
  %s = mul(%h, %c) : f32[4,8]
  %b = add(%s, %x) : f32[4,8]
  %m = reduce_max(%b) {axes=[1]} : f32[4]
  return %m
}
)");
  PassContext ctx;
  PropagateSharding().run(*g, ctx);
  PartitionSpmd().run(*g, ctx);
  verify(*g);
  std::string text = printGraph(*g);
  EXPECT_NE(text.find("%c.part = constant() {value=2.0} : f32[4,4]"), std::string::npos) << text;
  EXPECT_NE(text.find("%x.shard = shard(%x) {axis=1, devices=2, group=\"tp\"} : f32[4,4]"), std::string::npos) << text;
  EXPECT_NE(text.find("%b.all_gather = all_gather(%b) {axis=1, devices=2, group=\"tp\"} : f32[4,8]"), std::string::npos)
      << text;
}

TEST(PartitionSpmd, LeavesAGraphOnOneDeviceAlone) {
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[4,8]
  %w = parameter() {split=[1,1]} : f32[8,8]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0]} : f32[4,8]
  return %h
}
)");
  std::string before = printGraph(*g);
  PassContext ctx;
  EXPECT_FALSE(PartitionSpmd().run(*g, ctx));
  EXPECT_EQ(printGraph(*g), before);
}

TEST(PartitionSpmd, RefusesSplitsOverDifferentDeviceCounts) {
  auto g = parseGraph(R"(graph @g {
  %a = parameter() {split=[0,2]} : f32[8]
  %b = parameter() {split=[0,4]} : f32[8]
  %c = add(%a, %b) : f32[8]
  return %c
}
)");
  PassContext ctx;
  EXPECT_THROW(PartitionSpmd().run(*g, ctx), Error);
}

// The whole training graph of the built models: per layer, one all_reduce after each
// row-parallel forward GEMM; each gradient has its parameter's local type; the graph
// verifies.
TEST(PartitionSpmd, PartitionsTheTrainingGraphOfTheBuiltModels) {
  for (const char* preset : {"tiny", "medium"}) {
    ModelOverrides two;
    two.tensor_parallel = 2;
    ModelConfig c = loadModelConfig(preset, two);
    TransformerGraph t = buildModel(c);
    PassContext ctx;
    buildForwardPipeline()->run(*t.graph, ctx);
    std::vector<std::string> params;
    for (const Node* p : t.params) params.push_back(p->name());
    appendBackward(*t.graph, t.loss, t.params);
    buildTrainingPipeline({})->run(*t.graph, ctx);
    verify(*t.graph);
    std::map<std::string, int> forward_reduced;
    for (const Node* n : t.graph->nodes())
      if (n->op() == Op::kAllReduce && n->operand(0)->op() == Op::kMatMul &&
          n->operand(0)->attrs().getDirection(AttrKey::kDirection) == GemmDirection::kFwd)
        forward_reduced[n->operand(0)->attrs().getString(AttrKey::kLabel)] += 1;
    EXPECT_EQ(forward_reduced.size(), static_cast<size_t>(2 * c.n_layers)) << preset;
    for (const auto& [label, count] : forward_reduced) {
      EXPECT_TRUE(label.ends_with("/attn/out") || label.ends_with("/mlp/down")) << label;
      EXPECT_EQ(count, 1) << label;
    }
    ASSERT_EQ(t.graph->outputs().size(), params.size() + 1);
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_EQ(t.graph->outputs()[i + 1]->type(), t.graph->find(params[i])->type()) << params[i];
    EXPECT_EQ(t.graph->find("layer0/attn/wq")->shape(), Shape({c.d_model, c.d_model / 2})) << preset;
  }
}

TEST(DataParallel, AveragesTheLossAndGradientsButNotStatistics) {
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[4,8]
  %w = parameter() : f32[8,8]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0]} : f32[4,8]
  %s = quant_stats(%x) {formats=["int8:channel:rtn"], contract_dims=[1], uses=["g:lhs"], seed=0} : f32[1,9]
  %h2 = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0]} : f32[4,8]
  %e = error_stats(%h, %h2) {label="g", lhs_format="int8:channel:rtn", rhs_format="int8:channel:rtn"} : f32[3]
  return %h, %s, %e
}
)");
  PassContext ctx;
  EXPECT_TRUE(DataParallel().run(*g, ctx));
  EXPECT_EQ(g->outputs()[0]->op(), Op::kAllReduce);
  EXPECT_EQ(g->outputs()[0]->attrs().getGroup(AttrKey::kGroup), DeviceGroup::kData);
  EXPECT_EQ(g->outputs()[0]->attrs().getReduction(AttrKey::kReduce), Reduction::kMean);
  EXPECT_EQ(g->outputs()[1]->op(), Op::kQuantStats);
  EXPECT_EQ(g->outputs()[2]->op(), Op::kErrorStats);
  EXPECT_FALSE(DataParallel().run(*g, ctx));  // already averaged
}

}  // namespace
}  // namespace pgq
