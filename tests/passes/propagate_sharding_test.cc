#include <gtest/gtest.h>

#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/propagate_sharding.h"

namespace pgq {
namespace {

std::optional<ValueSplit> splitOf(const Graph& g, const std::string& name) { return valueSplit(*g.find(name)); }

TEST(PropagateSharding, FollowsAttentionThroughLayoutSoftmaxAndGemms) {
  // A column-parallel projection, split into heads, attention over them, merged back
  // and a row-parallel projection.
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[8,16]
  %wq = parameter() {split=[1,2]} : f32[16,16]
  %q = matmul(%x, %wq) {lhs_contract=[1], rhs_contract=[0]} : f32[8,16]
  %r = reshape(%q) : f32[2,4,4,4]
  %h = transpose(%r) {perm=[0,2,1,3]} : f32[2,4,4,4]
  %s = matmul(%h, %h) {lhs_contract=[3], rhs_contract=[3], lhs_batch=[0,1], rhs_batch=[0,1]} : f32[2,4,4,4]
  %p = softmax(%s) : f32[2,4,4,4]
  %m = transpose(%p) {perm=[0,2,1,3]} : f32[2,4,4,4]
  %merged = reshape(%m) : f32[8,16]
  %wo = parameter() {split=[0,2]} : f32[16,16]
  %y = matmul(%merged, %wo) {lhs_contract=[1], rhs_contract=[0]} : f32[8,16]
  %cols = reduce_sum(%q) {axes=[0]} : f32[16]
  %rows = reduce_sum(%q) {axes=[1]} : f32[8]
  %last = softmax(%q) : f32[8,16]
  return %y, %cols, %rows, %last
}
)");
  PassContext ctx;
  EXPECT_TRUE(PropagateSharding().run(*g, ctx));
  EXPECT_EQ(printGraph(*g), R"(graph @g {
  %x = input() : f32[8,16]
  %wq = parameter() {split=[1,2]} : f32[16,16]
  %q = matmul(%x, %wq) {lhs_contract=[1], rhs_contract=[0], split=[1,2]} : f32[8,16]
  %r = reshape(%q) {split=[2,2]} : f32[2,4,4,4]
  %h = transpose(%r) {perm=[0,2,1,3], split=[1,2]} : f32[2,4,4,4]
  %s = matmul(%h, %h) {lhs_contract=[3], rhs_contract=[3], lhs_batch=[0,1], rhs_batch=[0,1], split=[1,2]} : f32[2,4,4,4]
  %p = softmax(%s) {split=[1,2]} : f32[2,4,4,4]
  %m = transpose(%p) {perm=[0,2,1,3], split=[2,2]} : f32[2,4,4,4]
  %merged = reshape(%m) {split=[1,2]} : f32[8,16]
  %wo = parameter() {split=[0,2]} : f32[16,16]
  %y = matmul(%merged, %wo) {lhs_contract=[1], rhs_contract=[0]} : f32[8,16]
  %cols = reduce_sum(%q) {axes=[0], split=[0,2]} : f32[16]
  %rows = reduce_sum(%q) {axes=[1]} : f32[8]
  %last = softmax(%q) : f32[8,16]
  return %y, %cols, %rows, %last
}
)");
  // The row-parallel product (and reductions, softmax over the split dim) are partial
  // or need every part: not split. Running again changes nothing.
  EXPECT_FALSE(PropagateSharding().run(*g, ctx));
}

TEST(PropagateSharding, SlicePadConcatKeepSplitsOfDimsTheyLeaveWhole) {
  auto g = parseGraph(R"(graph @g {
  %w = parameter() {split=[1,2]} : f32[8,16]
  %top = slice(%w) {starts=[0,0], limits=[4,16]} : f32[4,16]
  %left = slice(%w) {starts=[0,0], limits=[8,8]} : f32[8,8]
  %below = pad(%w) {low=[0,0], high=[2,0]} : f32[10,16]
  %beside = pad(%w) {low=[0,1], high=[0,0]} : f32[8,17]
  %rows = concat(%w, %top) {axis=0} : f32[12,16]
  %cols = concat(%w, %w) {axis=1} : f32[8,32]
  %act = silu(%w) : f32[8,16]
  %sel = select(%act, %w, %act) : f32[8,16]
  return %left, %below, %beside, %rows, %cols, %sel
}
)");
  PassContext ctx;
  EXPECT_TRUE(PropagateSharding().run(*g, ctx));
  for (const char* kept : {"top", "below", "rows", "act", "sel"})
    EXPECT_EQ(splitOf(*g, kept), (ValueSplit{1, 2})) << kept;
  for (const char* dropped : {"left", "beside", "cols"}) EXPECT_FALSE(splitOf(*g, dropped)) << dropped;
}

TEST(PropagateSharding, OperandsMustAgree) {
  auto g = parseGraph(R"(graph @g {
  %a = parameter() {split=[0,2]} : f32[8,16]
  %b = parameter() {split=[1,2]} : f32[8,16]
  %c = parameter() : f32[8,16]
  %d = parameter() {split=[0,4]} : f32[8,16]
  %g = parameter() {split=[0,2]} : f32[16]
  %conflict = add(%a, %b) : f32[8,16]
  %with_replicated = mul(%a, %c) : f32[8,16]
  %other_devices = sub(%a, %d) : f32[8,16]
  %spread = broadcast(%g) {dims=[1]} : f32[8,16]
  %same = add(%b, %spread) : f32[8,16]
  %t = transpose(%a) {perm=[1,0]} : f32[16,8]
  %k = convert(%t) : bf16[16,8]
  return %conflict, %with_replicated, %other_devices, %same, %k
}
)");
  PassContext ctx;
  EXPECT_TRUE(PropagateSharding().run(*g, ctx));
  EXPECT_EQ(splitOf(*g, "conflict"), std::nullopt);
  EXPECT_EQ(splitOf(*g, "with_replicated"), (ValueSplit{0, 2}));
  EXPECT_EQ(splitOf(*g, "other_devices"), std::nullopt);
  EXPECT_EQ(splitOf(*g, "spread"), (ValueSplit{1, 2}));
  EXPECT_EQ(splitOf(*g, "same"), (ValueSplit{1, 2}));
  EXPECT_EQ(splitOf(*g, "k"), (ValueSplit{1, 2}));
}

TEST(PropagateSharding, KeepsExistingAnnotationsAndChangesNothingWithoutAny) {
  const char* text = R"(graph @g {
  %x = input() : f32[8,16]
  %w = parameter() : f32[16,4]
  %y = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0]} : f32[8,4]
  %z = exp(%y) : f32[8,4]
  return %z
}
)";
  auto g = parseGraph(text);
  PassContext ctx;
  EXPECT_FALSE(PropagateSharding().run(*g, ctx));
  EXPECT_EQ(printGraph(*g), text);
  // A user's annotation on an intermediate value is kept and propagated.
  g->find("y")->attrs().set(AttrKey::kSplit, std::vector<int64_t>{0, 2});
  EXPECT_TRUE(PropagateSharding().run(*g, ctx));
  EXPECT_EQ(splitOf(*g, "y"), (ValueSplit{0, 2}));
  EXPECT_EQ(splitOf(*g, "z"), (ValueSplit{0, 2}));
}

TEST(PropagateSharding, MegatronSplitsOfTheTransformer) {
  ModelConfig c = loadModelConfig("tiny");  // d 32, heads 2, d_ff 64
  c.tensor_parallel = 2;
  TransformerGraph t = buildTransformer(c);
  appendBackward(*t.graph, t.loss, t.params);
  PassContext ctx;
  EXPECT_TRUE(PropagateSharding().run(*t.graph, ctx));
  const Graph& g = *t.graph;
  // Column-parallel q: its result [N,D] is split along D, which becomes the heads.
  EXPECT_EQ(splitOf(g, "layer0/attn/q"), (ValueSplit{1, 2}));
  EXPECT_EQ(splitOf(g, "layer0/attn/q_heads"), (ValueSplit{1, 2}));
  EXPECT_EQ(splitOf(g, "layer0/attn/probs"), (ValueSplit{1, 2}));
  EXPECT_EQ(splitOf(g, "layer0/attn/merged"), (ValueSplit{1, 2}));
  // Row-parallel out and down leave partial sums: the residual stream is not split.
  EXPECT_EQ(splitOf(g, "layer0/attn/out"), std::nullopt);
  EXPECT_EQ(splitOf(g, "layer0/mlp/act"), (ValueSplit{1, 2}));
  EXPECT_EQ(splitOf(g, "layer0/mlp/down"), std::nullopt);
  // The embedding lookup of a vocab-split table is partial; the logits are vocab-split.
  EXPECT_EQ(splitOf(g, "embed/tok"), std::nullopt);
  EXPECT_EQ(splitOf(g, "logits"), (ValueSplit{1, 2}));
}

}  // namespace
}  // namespace pgq
