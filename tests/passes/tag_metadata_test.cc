#include <gtest/gtest.h>

#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "support/errors.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/tag_metadata.h"

namespace pgq {
namespace {

TEST(TagMetadata, TagsAHandWrittenGraphFromItsStructure) {
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[8,16]
  %w = parameter() : f32[16,32]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="layer3/mlp/up"} : f32[8,32]
  %t = input() : s32[8]
  %one = constant() {value=1.0} : f32[]
  %dh = cross_entropy_grad(%h, %t, %one) : f32[8,32]
  %dw = matmul(%x, %dh) {lhs_contract=[0], rhs_contract=[0], label="layer3/mlp/up:wgrad"} : f32[16,32]
  return %dw
}
)");
  PassContext ctx;
  EXPECT_TRUE(TagMetadata().run(*g, ctx));
  EXPECT_EQ(printGraph(*g), R"(graph @g {
  %x = input() : f32[8,16]
  %w = parameter() : f32[16,32]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="layer3/mlp/up", direction="fwd", roles=["activation","weight"], layer=3, gemm_shape=[1,8,16,32], flops=8192, bytes=3584, sharding="column", devices=1, device_shape=[1,8,16,32]} : f32[8,32]
  %t = input() : s32[8]
  %one = constant() {value=1.0} : f32[]
  %dh = cross_entropy_grad(%h, %t, %one) : f32[8,32]
  %dw = matmul(%x, %dh) {lhs_contract=[0], rhs_contract=[0], label="layer3/mlp/up:wgrad", direction="bwd_wgrad", roles=["activation","gradient"], layer=3, gemm_shape=[1,16,8,32], flops=8192, bytes=3584, sharding="column", devices=1, device_shape=[1,16,8,32]} : f32[16,32]
  return %dw
}
)");
  // Running again changes nothing.
  EXPECT_FALSE(TagMetadata().run(*g, ctx));
}

TEST(TagMetadata, LayerComesFromALayerPrefix) {
  auto layerOf = [](const std::string& label) {
    auto g = parseGraph(R"(graph @g {
  %x = input() : f32[8,16]
  %w = parameter() : f32[16,32]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label=")" + label + R"("} : f32[8,32]
  return %h
}
)");
    PassContext ctx;
    TagMetadata().run(*g, ctx);
    return g->find("h")->attrs().getInt(AttrKey::kLayer);
  };
  EXPECT_EQ(layerOf("layer12/mlp/up"), 12);
  EXPECT_EQ(layerOf("layer/mlp/up"), -1);
  EXPECT_EQ(layerOf("layer3"), -1);
  EXPECT_EQ(layerOf("xlayer3/mlp/up"), -1);
  // A layer number no int64 holds is the label's fault: an error, not a crash.
  EXPECT_THROW(layerOf("layer99999999999999999999/mlp/up"), Error);
}

TEST(TagMetadata, MegatronShardingOfTheTransformer) {
  ModelConfig c = loadModelConfig("tiny");  // d 32, heads 2, d_ff 64, tokens 64, vocab 256
  TransformerGraph t = buildTransformer(c);
  appendBackward(*t.graph, t.loss, t.params);
  PassContext ctx;
  EXPECT_TRUE(TagMetadata({.tensor_parallel = 2}).run(*t.graph, ctx));
  std::map<std::string, const Node*> by_label;
  for (const Node* n : t.graph->nodes())
    if (n->op() == Op::kMatMul) by_label[n->attrs().getString(AttrKey::kLabel)] = n;
  auto device = [&](const std::string& label) { return by_label.at(label)->attrs().getInts(AttrKey::kDeviceShape); };
  auto sharding = [&](const std::string& label) { return by_label.at(label)->attrs().getString(AttrKey::kSharding); };
  using V = std::vector<int64_t>;
  // Column-parallel: the weight's output dim is split.
  EXPECT_EQ(sharding("layer0/attn/q"), "column");
  EXPECT_EQ(device("layer0/attn/q"), (V{1, 64, 32, 16}));        // N / 2
  EXPECT_EQ(device("layer0/attn/q:dgrad"), (V{1, 64, 16, 32}));  // K / 2 (partial sums)
  EXPECT_EQ(device("layer0/attn/q:wgrad"), (V{1, 32, 64, 16}));  // N / 2
  EXPECT_EQ(device("layer0/mlp/up"), (V{1, 64, 32, 32}));
  // Row-parallel: the weight's input dim is split.
  EXPECT_EQ(sharding("layer0/mlp/down"), "row");
  EXPECT_EQ(device("layer0/mlp/down"), (V{1, 64, 32, 32}));        // K 64 / 2
  EXPECT_EQ(device("layer0/mlp/down:dgrad"), (V{1, 64, 32, 32}));  // N 64 / 2
  EXPECT_EQ(device("layer0/mlp/down:wgrad"), (V{1, 32, 64, 32}));  // M 64 / 2
  // Attention splits heads (the batch of its GEMMs).
  EXPECT_EQ(sharding("layer1/attn/scores"), "heads");
  EXPECT_EQ(device("layer1/attn/scores"), (V{4, 16, 16, 16}));     // batch 8 / 2
  EXPECT_EQ(device("layer1/attn/av:dgrad_rhs")[0], 4);
  // The tied logits GEMM: vocab-parallel; its wgrad computes dW^T-shaped [V, D].
  EXPECT_EQ(device("get_logits"), (V{1, 64, 32, 128}));
  EXPECT_EQ(device("get_logits:dgrad"), (V{1, 64, 128, 32}));
  EXPECT_EQ(device("get_logits:wgrad"), (V{1, 128, 64, 32}));
  for (const auto& [label, node] : by_label) {
    EXPECT_EQ(node->attrs().getInt(AttrKey::kDevices), 2) << label;
    EXPECT_EQ(node->attrs().getInt(AttrKey::kLayer), label.starts_with("layer1") ? 1 : label.starts_with("layer0") ? 0 : -1)
        << label;
  }
}

TEST(TagMetadata, UnevenSplitsStayReplicated) {
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[8,16]
  %w = parameter() : f32[16,5]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="layer0/mlp/up"} : f32[8,5]
  return %h
}
)");
  PassContext ctx;
  TagMetadata({.tensor_parallel = 2}).run(*g, ctx);
  EXPECT_EQ(g->find("h")->attrs().getString(AttrKey::kSharding), "replicated");
  EXPECT_EQ(g->find("h")->attrs().getInts(AttrKey::kDeviceShape), (std::vector<int64_t>{1, 8, 16, 5}));
}

}  // namespace
}  // namespace pgq
