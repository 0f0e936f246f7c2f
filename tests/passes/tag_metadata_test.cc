#include <map>
#include <regex>

#include <gtest/gtest.h>

#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "ir/builder.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/pipeline.h"
#include "passes/tag_metadata.h"
#include "support/errors.h"

namespace pgq {
namespace {

TEST(TagMetadata, TagsAHandWrittenGraphFromItsStructure) {
  // The labels say nothing: direction, roles, layer and sharding come from gemm/grad_of/
  // wrt, the dataflow, the forward GEMM's layer and the weight's split annotation.
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[8,16]
  %w = parameter() {split=[1,1]} : f32[16,32]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], gemm=0, label="a", layer=3} : f32[8,32]
  %t = input() : s32[8]
  %one = constant() {value=1.0} : f32[]
  %dh = cross_entropy_grad(%h, %t, %one) : f32[8,32]
  %dw = matmul(%x, %dh) {lhs_contract=[0], rhs_contract=[0], grad_of=0, wrt="rhs", label="b"} : f32[16,32]
  return %dw
}
)");
  PassContext ctx;
  EXPECT_TRUE(TagMetadata().run(*g, ctx));
  EXPECT_EQ(printGraph(*g), R"(graph @g {
  %x = input() : f32[8,16]
  %w = parameter() {split=[1,1]} : f32[16,32]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], gemm=0, label="a", direction="fwd", roles=["activation","weight"], layer=3, gemm_shape=[1,8,16,32], flops=8192, bytes=3584, sharding="column", devices=1, device_shape=[1,8,16,32]} : f32[8,32]
  %t = input() : s32[8]
  %one = constant() {value=1.0} : f32[]
  %dh = cross_entropy_grad(%h, %t, %one) : f32[8,32]
  %dw = matmul(%x, %dh) {lhs_contract=[0], rhs_contract=[0], grad_of=0, wrt="rhs", label="b", direction="bwd_wgrad", roles=["activation","gradient"], layer=3, gemm_shape=[1,16,8,32], flops=8192, bytes=3584, sharding="column", devices=1, device_shape=[1,16,8,32]} : f32[16,32]
  return %dw
}
)");
  // Running again changes nothing.
  EXPECT_FALSE(TagMetadata().run(*g, ctx));
}

TEST(TagMetadata, LayerComesFromTheGraphNotTheLabel) {
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[8,16]
  %w = parameter() : f32[16,32]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], gemm=4, label="layer12/mlp/up", layer=2} : f32[8,32]
  %dx = matmul(%h, %w) {lhs_contract=[1], rhs_contract=[1], grad_of=4, wrt="lhs", label="layer7/mlp/up:wgrad"} : f32[8,16]
  %other = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="layer5/mlp/up"} : f32[8,32]
  return %dx, %other
}
)");
  PassContext ctx;
  TagMetadata().run(*g, ctx);
  EXPECT_EQ(g->find("h")->attrs().getInt(AttrKey::kLayer), 2);
  EXPECT_EQ(g->find("dx")->attrs().getInt(AttrKey::kLayer), 2);  // the forward GEMM's
  EXPECT_EQ(g->find("other")->attrs().getInt(AttrKey::kLayer), -1);
  // A ":wgrad" label does not make a wgrad: the differentiated operand is an activation.
  EXPECT_EQ(g->find("dx")->attrs().getDirection(AttrKey::kDirection), GemmDirection::kBwdDgrad);
  EXPECT_EQ(g->find("other")->attrs().getDirection(AttrKey::kDirection), GemmDirection::kFwd);
}

TEST(TagMetadata, RejectsABackwardGemmWithoutItsForwardGemm) {
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[8,16]
  %w = parameter() : f32[16,32]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], grad_of=9, wrt="lhs"} : f32[8,32]
  return %h
}
)");
  PassContext ctx;
  EXPECT_THROW(TagMetadata().run(*g, ctx), Error);
}

std::map<std::string, const Node*> gemmsByLabel(const Graph& g) {
  std::map<std::string, const Node*> by_label;
  for (const Node* n : g.nodes())
    if (n->op() == Op::kMatMul) by_label[n->attrs().getString(AttrKey::kLabel)] = n;
  return by_label;
}

TEST(TagMetadata, DirectionsAndRolesOfTheTrainingGraph) {
  TransformerGraph t = buildTransformer(loadModelConfig("tiny"));
  appendBackward(*t.graph, t.loss, t.params);
  PassContext ctx;
  parsePipeline("propagate_sharding,tag_metadata")->run(*t.graph, ctx);
  auto by_label = gemmsByLabel(*t.graph);
  auto roles = [&](const std::string& label) { return by_label.at(label)->attrs().getRoles(AttrKey::kRoles); };
  auto direction = [&](const std::string& label) { return by_label.at(label)->attrs().getDirection(AttrKey::kDirection); };
  using R = OperandRoles;
  constexpr auto kW = OperandRole::kWeight, kA = OperandRole::kActivation, kG = OperandRole::kGradient;
  EXPECT_EQ(direction("layer1/mlp/up"), GemmDirection::kFwd);
  EXPECT_EQ(roles("layer1/mlp/up"), (R{kA, kW}));
  EXPECT_EQ(direction("layer1/mlp/up:dgrad"), GemmDirection::kBwdDgrad);
  EXPECT_EQ(roles("layer1/mlp/up:dgrad"), (R{kG, kW}));
  EXPECT_EQ(direction("layer1/mlp/up:wgrad"), GemmDirection::kBwdWgrad);
  EXPECT_EQ(roles("layer1/mlp/up:wgrad"), (R{kA, kG}));
  EXPECT_EQ(direction("get_logits:dgrad"), GemmDirection::kBwdDgrad);
  EXPECT_EQ(direction("get_logits:wgrad"), GemmDirection::kBwdWgrad);
  EXPECT_EQ(roles("get_logits:wgrad"), (R{kG, kA}));  // dW^T = dlogits^T x h
  EXPECT_EQ(direction("layer0/attn/scores:dgrad_lhs"), GemmDirection::kBwdDgrad);
  EXPECT_EQ(direction("layer0/attn/scores:dgrad_rhs"), GemmDirection::kBwdDgrad);
  EXPECT_EQ(roles("layer0/attn/scores"), (R{kA, kA}));
  EXPECT_EQ(roles("layer0/attn/av:dgrad_rhs"), (R{kA, kG}));
}

// A loss without a fused gradient op: the gradient a backward GEMM receives is still
// a gradient (it comes from the loss's seed, not from a *_grad op).
TEST(TagMetadata, GradientsOfAPlainLoss) {
  Graph g("plain");
  Builder b(g);
  Node* x = b.input("x", {DType::kF32, Shape{8, 16}});
  Node* w = b.parameter("w", {DType::kF32, Shape{16, 4}});
  Node* loss = b.reduce(Op::kReduceSum, b.matmul(x, w, DotDims::matrix(), "", "y"), {0, 1}, "loss");
  appendBackward(g, loss, std::vector<Node*>{w});
  PassContext ctx;
  TagMetadata().run(g, ctx);
  int backward = 0;
  for (const Node* n : g.nodes()) {
    if (n->op() != Op::kMatMul || !n->attrs().has(AttrKey::kGradOf)) continue;
    ++backward;
    EXPECT_EQ(n->attrs().getDirection(AttrKey::kDirection), GemmDirection::kBwdWgrad);
    EXPECT_EQ(n->attrs().getRoles(AttrKey::kRoles), (OperandRoles{OperandRole::kActivation, OperandRole::kGradient}));
    EXPECT_EQ(n->attrs().getString(AttrKey::kLabel), "y:wgrad");
  }
  EXPECT_EQ(backward, 1);
}

TEST(TagMetadata, MegatronShardingOfTheTransformer) {
  ModelConfig c = loadModelConfig("tiny");  // d 32, heads 2, d_ff 64, tokens 64, vocab 256
  c.tensor_parallel = 2;
  TransformerGraph t = buildTransformer(c);
  appendBackward(*t.graph, t.loss, t.params);
  PassContext ctx;
  EXPECT_TRUE(parsePipeline("propagate_sharding,tag_metadata")->run(*t.graph, ctx));
  auto by_label = gemmsByLabel(*t.graph);
  auto device = [&](const std::string& label) { return by_label.at(label)->attrs().getInts(AttrKey::kDeviceShape); };
  auto sharding = [&](const std::string& label) { return by_label.at(label)->attrs().getSharding(AttrKey::kSharding); };
  using V = std::vector<int64_t>;
  // Column-parallel: the weight's output dim is split.
  EXPECT_EQ(sharding("layer0/attn/q"), ShardingKind::kColumn);
  EXPECT_EQ(device("layer0/attn/q"), (V{1, 64, 32, 16}));        // N / 2
  EXPECT_EQ(device("layer0/attn/q:dgrad"), (V{1, 64, 16, 32}));  // K / 2 (partial sums)
  EXPECT_EQ(device("layer0/attn/q:wgrad"), (V{1, 32, 64, 16}));  // N / 2
  EXPECT_EQ(device("layer0/mlp/up"), (V{1, 64, 32, 32}));
  // Row-parallel: the weight's input dim is split.
  EXPECT_EQ(sharding("layer0/mlp/down"), ShardingKind::kRow);
  EXPECT_EQ(device("layer0/mlp/down"), (V{1, 64, 32, 32}));        // K 64 / 2
  EXPECT_EQ(device("layer0/mlp/down:dgrad"), (V{1, 64, 32, 32}));  // N 64 / 2
  EXPECT_EQ(device("layer0/mlp/down:wgrad"), (V{1, 32, 64, 32}));  // M 64 / 2
  // Attention splits heads (the batch of its GEMMs).
  EXPECT_EQ(sharding("layer1/attn/scores"), ShardingKind::kHeads);
  EXPECT_EQ(device("layer1/attn/scores"), (V{4, 16, 16, 16}));     // batch 8 / 2
  EXPECT_EQ(device("layer1/attn/av:dgrad_rhs")[0], 4);
  // The tied logits GEMM: vocab-parallel; its wgrad computes dW^T-shaped [V, D].
  EXPECT_EQ(sharding("get_logits"), ShardingKind::kColumn);
  EXPECT_EQ(device("get_logits"), (V{1, 64, 32, 128}));
  EXPECT_EQ(device("get_logits:dgrad"), (V{1, 64, 128, 32}));
  EXPECT_EQ(device("get_logits:wgrad"), (V{1, 128, 64, 32}));
  for (const auto& [label, node] : by_label) {
    EXPECT_EQ(node->attrs().getInt(AttrKey::kDevices), 2) << label;
    EXPECT_EQ(node->attrs().getInt(AttrKey::kLayer), label.starts_with("layer1") ? 1 : label.starts_with("layer0") ? 0 : -1)
        << label;
  }
}

// The LLaMA block's GEMMs get the same metadata: gate is column-parallel like up, and
// the heads split reaches scores and av through rope and the shared k/v heads.
TEST(TagMetadata, MegatronShardingOfTheLlamaBlock) {
  ModelConfig c = loadModelConfig("tiny");  // d 32, d_ff 64, tokens 64, vocab 256
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.position = Position::kRope;
  c.activation = Activation::kSwiGlu;
  c.tensor_parallel = 2;
  TransformerGraph t = buildTransformer(c);
  appendBackward(*t.graph, t.loss, t.params);
  PassContext ctx;
  EXPECT_TRUE(parsePipeline("propagate_sharding,tag_metadata")->run(*t.graph, ctx));
  auto by_label = gemmsByLabel(*t.graph);
  auto device = [&](const std::string& label) { return by_label.at(label)->attrs().getInts(AttrKey::kDeviceShape); };
  auto sharding = [&](const std::string& label) { return by_label.at(label)->attrs().getSharding(AttrKey::kSharding); };
  using V = std::vector<int64_t>;
  for (const char* label : {"layer0/mlp/gate", "layer0/mlp/up", "layer0/attn/k"})
    EXPECT_EQ(sharding(label), ShardingKind::kColumn) << label;
  EXPECT_EQ(device("layer0/mlp/gate"), (V{1, 64, 32, 32}));  // N 64 / 2
  EXPECT_EQ(device("layer0/mlp/gate:wgrad"), (V{1, 32, 64, 32}));
  EXPECT_EQ(device("layer0/attn/k"), (V{1, 64, 32, 8}));     // k is 2 heads of 8: N 16 / 2
  EXPECT_EQ(sharding("layer0/mlp/down"), ShardingKind::kRow);
  EXPECT_EQ(sharding("layer1/attn/scores"), ShardingKind::kHeads);
  EXPECT_EQ(device("layer1/attn/scores"), (V{8, 16, 8, 16}));  // batch 4 x 4 heads / 2
  EXPECT_EQ(sharding("layer1/attn/av:dgrad_rhs"), ShardingKind::kHeads);
  EXPECT_EQ(by_label.at("layer1/mlp/gate:dgrad")->attrs().getInt(AttrKey::kLayer), 1);
  EXPECT_EQ(by_label.at("layer1/mlp/gate")->attrs().getDirection(AttrKey::kDirection), GemmDirection::kFwd);
}

TEST(TagMetadata, UnevenSplitsStayReplicated) {
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[8,16]
  %w = parameter() {split=[1,2]} : f32[16,5]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="layer0/mlp/up"} : f32[8,5]
  %v = parameter() : f32[16,4]
  %y = matmul(%x, %v) {lhs_contract=[1], rhs_contract=[0]} : f32[8,4]
  return %h, %y
}
)");
  PassContext ctx;
  TagMetadata().run(*g, ctx);
  EXPECT_EQ(g->find("h")->attrs().getSharding(AttrKey::kSharding), ShardingKind::kReplicated);
  EXPECT_EQ(g->find("h")->attrs().getInt(AttrKey::kDevices), 2);
  EXPECT_EQ(g->find("h")->attrs().getInts(AttrKey::kDeviceShape), (std::vector<int64_t>{1, 8, 16, 5}));
  // No split reaches %y: it runs replicated on the graph's two devices.
  EXPECT_EQ(g->find("y")->attrs().getSharding(AttrKey::kSharding), ShardingKind::kReplicated);
  EXPECT_EQ(g->find("y")->attrs().getInt(AttrKey::kDevices), 2);
  EXPECT_EQ(g->find("y")->attrs().getString(AttrKey::kLabel), "y");  // no label: the node name
}

// The training graph of `config` after the training passes, as text.
std::string trainingGraphText(const ModelConfig& config) {
  TransformerGraph t = buildTransformer(config);
  appendBackward(*t.graph, t.loss, t.params);
  return printGraph(*t.graph);
}

// Renames every value (%v0, %v1, ...) and gives every GEMM a meaningless label, or none
// (then tag_metadata labels it with its new node name).
std::string renamed(const std::string& text) {
  std::map<std::string, std::string> names;
  std::string out;
  std::regex value(R"(%([A-Za-z0-9_./]+))");
  auto begin = std::sregex_iterator(text.begin(), text.end(), value);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    auto [entry, added] = names.emplace((*it)[1].str(), "");
    if (added) entry->second = "v" + std::to_string(names.size());
    out += text.substr(last, static_cast<size_t>(it->position()) - last) + "%" + entry->second;
    last = static_cast<size_t>(it->position() + it->length());
  }
  out += text.substr(last);
  std::regex label(R"(, label="[^"]*")");
  std::string relabelled;
  int n = 0;
  last = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), label); it != std::sregex_iterator(); ++it, ++n) {
    relabelled += out.substr(last, static_cast<size_t>(it->position()) - last);
    if (n % 3 != 2) relabelled += ", label=\"zq" + std::to_string(n * 7919 % 1000) + "\"";
    last = static_cast<size_t>(it->position() + it->length());
  }
  return relabelled + out.substr(last);
}

// Per GEMM, in graph order: what tag_metadata derived.
std::vector<std::string> derivedMetadata(Graph& graph) {
  PassContext ctx;
  parsePipeline("cse,dce,propagate_sharding,tag_metadata")->run(graph, ctx);
  std::vector<std::string> out;
  for (const Node* n : graph.postOrder()) {
    if (n->op() != Op::kMatMul) continue;
    std::string line;
    for (AttrKey key : {AttrKey::kDirection, AttrKey::kRoles, AttrKey::kLayer, AttrKey::kGemmShape, AttrKey::kSharding,
                        AttrKey::kDevices, AttrKey::kDeviceShape})
      for (const auto& [k, v] : n->attrs().entries())
        if (k == key) line += fmt::format("{}={} ", attrName(k), formatAttrValue(v));
    out.push_back(line);
  }
  return out;
}

// Golden: labels and names carry no meaning. Renaming every value and every GEMM label
// of `small` (and of a tensor-parallel variant) changes nothing tag_metadata derives.
TEST(TagMetadata, RenamingEveryLabelAndValueChangesNothing) {
  ModelConfig small = loadModelConfig("small");
  ModelConfig parallel = small;
  parallel.tensor_parallel = 2;
  ModelConfig uneven = loadModelConfig("tiny");
  uneven.tensor_parallel = 3;  // 32-wide projections do not split 3 ways: replicated fallbacks
  for (const ModelConfig& config : {small, parallel, uneven}) {
    SCOPED_TRACE(fmt::format("{} on {} devices", config.name, config.tensor_parallel));
    std::string text = trainingGraphText(config);
    std::string meaningless = renamed(text);
    for (const char* meaningful : {"layer0", "/attn/", "/mlp/", "get_logits", "scores", ":dgrad", ":wgrad", "wq", "w_up"})
      ASSERT_EQ(meaningless.find(meaningful), std::string::npos) << meaningful;
    auto original = parseGraph(text);
    auto anonymous = parseGraph(meaningless);
    std::vector<std::string> expected = derivedMetadata(*original);
    std::vector<std::string> got = derivedMetadata(*anonymous);
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_EQ(got.size(), config.name == "small" ? 4u * 24u + 3u : 2u * 24u + 3u);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "GEMM " << i;
  }
}

}  // namespace
}  // namespace pgq
