// Every gradient rule against central finite differences, all in double precision
// through the reference evaluator.
#include <cmath>
#include <functional>

#include <gtest/gtest.h>

#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "ir/builder.h"
#include "ir/verifier.h"
#include "runtime/reference.h"
#include "support/errors.h"

namespace pgq {
namespace {

// Builds loss = sum(f(params) * weights) (or f itself when it is a scalar), appends the
// backward graph and checks every parameter gradient against central differences.
void checkGradients(const std::function<Node*(Builder&, std::vector<Node*>&)>& body,
                    std::vector<TensorType> param_types, double tol = 1e-6,
                    int max_elements_per_param = 64) {
  Graph g("fd");
  Builder b(g);
  std::vector<Node*> params;
  for (size_t i = 0; i < param_types.size(); ++i)
    params.push_back(b.parameter(fmt::format("p{}", i), param_types[i]));
  Node* y = body(b, params);
  Node* loss = y;
  if (y->shape().rank() > 0) {
    Node* w = b.input("w", y->type());
    std::vector<int64_t> all(static_cast<size_t>(y->shape().rank()));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    loss = b.reduce(Op::kReduceSum, b.mul(y, w), all, "loss");
  }
  g.addOutput(loss);
  std::vector<Node*> grads = appendBackward(g, loss, params);
  verify(g);

  ReferenceEvaluator ref(g);
  std::vector<RefTensor> values;
  uint64_t seed = 11;
  for (Node* p : params) values.push_back(randomRefTensor(p->type(), seed++));
  std::vector<Node*> inputs;
  for (Node* n : g.nodes())
    if (n->op() == Op::kInput) {
      RefTensor v = n->dtype() == DType::kS32 ? randomIndices(n->type(), 3, seed++)
                                              : randomRefTensor(n->type(), seed++);
      ref.setInput(n, v);
    }
  auto setParams = [&] {
    for (size_t i = 0; i < params.size(); ++i) ref.setInput(params[i], values[i]);
  };
  setParams();
  ref.run();
  std::vector<RefTensor> analytic;
  for (Node* grad : grads) analytic.push_back(ref.value(grad));

  for (size_t p = 0; p < params.size(); ++p) {
    size_t n = values[p].data.size();
    size_t stride = std::max<size_t>(1, n / static_cast<size_t>(max_elements_per_param));
    for (size_t i = 0; i < n; i += stride) {
      double x0 = values[p].data[i];
      double h = 1e-6 * std::max(1.0, std::abs(x0));
      auto lossAt = [&](double x) {
        values[p].data[i] = x;
        setParams();
        ref.run();
        return ref.value(loss).data[0];
      };
      double numeric = (lossAt(x0 + h) - lossAt(x0 - h)) / (2 * h);
      values[p].data[i] = x0;
      double exact = analytic[p].data[i];
      EXPECT_NEAR(exact, numeric, tol * std::max(1.0, std::abs(numeric)))
          << "param " << p << " element " << i;
    }
  }
  setParams();
}

TensorType f32(Shape s) { return {DType::kF32, std::move(s)}; }

Node* positive(Builder& b, Node* x) {  // x^2 + 0.5: keeps log/rsqrt/div away from poles
  return b.add(b.mul(x, x), b.broadcast(b.scalar(0.5), x->shape(), {}));
}

TEST(Autodiff, Elementwise) {
  checkGradients([](Builder& b, auto& p) { return b.add(p[0], p[1]); }, {f32({3, 4}), f32({3, 4})});
  checkGradients([](Builder& b, auto& p) { return b.sub(p[0], p[1]); }, {f32({3, 4}), f32({3, 4})});
  checkGradients([](Builder& b, auto& p) { return b.mul(p[0], p[1]); }, {f32({3, 4}), f32({3, 4})});
  checkGradients([](Builder& b, auto& p) { return b.div(p[0], positive(b, p[1])); },
                 {f32({3, 4}), f32({3, 4})});
  checkGradients([](Builder& b, auto& p) { return b.max(p[0], p[1]); }, {f32({3, 4}), f32({3, 4})});
  checkGradients([](Builder& b, auto& p) { return b.unary(Op::kNeg, p[0]); }, {f32({5})});
  checkGradients([](Builder& b, auto& p) { return b.unary(Op::kExp, p[0]); }, {f32({5})});
  checkGradients([](Builder& b, auto& p) { return b.unary(Op::kLog, positive(b, p[0])); }, {f32({5})});
  checkGradients([](Builder& b, auto& p) { return b.unary(Op::kRsqrt, positive(b, p[0])); }, {f32({5})});
  checkGradients([](Builder& b, auto& p) { return b.unary(Op::kTanh, p[0]); }, {f32({5})});
  checkGradients([](Builder& b, auto& p) { return b.unary(Op::kRelu, p[0]); }, {f32({7})});
  checkGradients([](Builder& b, auto& p) { return b.unary(Op::kGelu, p[0]); }, {f32({7})});
  checkGradients([](Builder& b, auto& p) { return b.unary(Op::kSqrt, positive(b, p[0])); }, {f32({5})});
  checkGradients([](Builder& b, auto& p) { return b.unary(Op::kSigmoid, p[0]); }, {f32({7})});
  checkGradients([](Builder& b, auto& p) { return b.unary(Op::kErf, p[0]); }, {f32({7})});
  checkGradients([](Builder& b, auto& p) { return b.unary(Op::kSilu, p[0]); }, {f32({7})});
  checkGradients([](Builder& b, auto& p) { return b.unary(Op::kGeluErf, p[0]); }, {f32({7})});
  // ge is piecewise constant: its gradient is zero, so only the other path counts.
  checkGradients([](Builder& b, auto& p) { return b.mul(b.ge(p[0], p[1]), p[0]); },
                 {f32({6}), f32({6})});
}

TEST(Autodiff, Layout) {
  checkGradients([](Builder& b, auto& p) { return b.transpose(p[0], {2, 0, 1}); }, {f32({2, 3, 4})});
  checkGradients([](Builder& b, auto& p) { return b.reshape(p[0], Shape{6, 4}); }, {f32({2, 3, 4})});
  checkGradients([](Builder& b, auto& p) { return b.broadcast(p[0], Shape{2, 3, 4}, {1}); }, {f32({3})});
  checkGradients([](Builder& b, auto& p) { return b.broadcast(p[0], Shape{2, 3, 4}, {0, 2}); },
                 {f32({2, 4})});
  checkGradients([](Builder& b, auto& p) { return b.broadcast(p[0], Shape{3}, {0}); }, {f32({3})});
  checkGradients([](Builder& b, auto& p) { return b.slice(p[0], {1, 0, 2}, {2, 3, 3}); }, {f32({2, 3, 4})});
  checkGradients([](Builder& b, auto& p) { return b.slice(p[0], {0, 0}, {2, 3}); }, {f32({2, 3})});
  checkGradients([](Builder& b, auto& p) { return b.pad(p[0], {1, 0, 2}, {0, 3, 1}); }, {f32({2, 3, 4})});
  for (int64_t axis : {0, 1, 2})
    checkGradients([axis](Builder& b, auto& p) { return b.concat(p[0], p[1], axis); },
                   {f32({2, 3, 4}), f32({axis == 0 ? 3 : 2, axis == 1 ? 1 : 3, axis == 2 ? 5 : 4})});
}

TEST(Autodiff, SelectRoutesTheGradientByCondition) {
  // The condition comes from a parameter too: it is piecewise constant and gets none.
  checkGradients([](Builder& b, auto& p) { return b.select(b.ge(p[0], p[1]), p[1], p[2]); },
                 {f32({3, 4}), f32({3, 4}), f32({3, 4})});
  checkGradients([](Builder& b, auto& p) {
    Node* cond = b.ge(b.input("c", f32({6})), b.constant(0.0, f32({6})));
    return b.select(cond, p[0], b.unary(Op::kExp, p[0]));
  }, {f32({6})});
}

TEST(Autodiff, Reductions) {
  for (Op op : {Op::kReduceSum, Op::kReduceMean, Op::kReduceMax}) {
    checkGradients([op](Builder& b, auto& p) { return b.reduce(op, p[0], {1}); }, {f32({3, 4, 2})});
    checkGradients([op](Builder& b, auto& p) { return b.reduce(op, p[0], {0, 2}); }, {f32({3, 4, 2})});
    checkGradients([op](Builder& b, auto& p) { return b.reduce(op, p[0], {0, 1, 2}); }, {f32({3, 4, 2})});
  }
}

TEST(Autodiff, AttentionNormalizationAndLoss) {
  checkGradients([](Builder& b, auto& p) { return b.softmax(p[0]); }, {f32({3, 5})});
  checkGradients(
      [](Builder& b, auto& p) {
        return b.softmax(b.causalMask(p[0], -std::numeric_limits<double>::infinity()));
      },
      {f32({2, 4, 4})});
  // Rope on positions 0..4 with a small theta, so that every pair turns by a sizeable
  // angle; the inverse rotation has its own rule (the forward rotation of dy).
  for (RopeRotation rotation : {RopeRotation::kForward, RopeRotation::kInverse})
    checkGradients([rotation](Builder& b, auto& p) { return b.rope(p[0], 3.0, rotation); }, {f32({2, 3, 5, 6})});
  checkGradients([](Builder& b, auto& p) { return b.norm(Op::kRmsNorm, p[0], 1e-5); }, {f32({3, 6})});
  checkGradients([](Builder& b, auto& p) { return b.norm(Op::kLayerNorm, p[0], 1e-5); }, {f32({3, 6})});
  checkGradients(
      [](Builder& b, auto& p) {
        Node* idx = b.input("idx", {DType::kS32, Shape{2, 5}});
        return b.gather(p[0], idx);
      },
      {f32({3, 4})});
  checkGradients(
      [](Builder& b, auto& p) {
        Node* idx = b.input("idx", {DType::kS32, Shape{5}});
        return b.scatterAdd(p[0], idx, Shape{3, 4});
      },
      {f32({5, 4})});
  checkGradients(
      [](Builder& b, auto& p) {
        Node* targets = b.input("targets", {DType::kS32, Shape{4}});
        return b.crossEntropy(p[0], targets);
      },
      {f32({4, 3})});
}

TEST(Autodiff, MatMulInEveryLayout) {
  struct Case {
    Shape lhs, rhs;
    DotDims dims;
  };
  std::vector<Case> cases = {
      {Shape{3, 4}, Shape{4, 5}, {{1}, {0}, {}, {}}},
      {Shape{4, 3}, Shape{4, 5}, {{0}, {0}, {}, {}}},
      {Shape{3, 4}, Shape{5, 4}, {{1}, {1}, {}, {}}},
      {Shape{2, 3, 4}, Shape{4, 5}, {{2}, {0}, {}, {}}},
      {Shape{2, 2, 3, 4}, Shape{2, 2, 5, 4}, {{3}, {3}, {0, 1}, {0, 1}}},
      {Shape{2, 2, 3, 5}, Shape{2, 2, 5, 4}, {{3}, {2}, {0, 1}, {0, 1}}},
      {Shape{3, 2, 4}, Shape{2, 4, 5}, {{2}, {1}, {1}, {0}}},
      {Shape{4, 3, 2}, Shape{2, 5, 4}, {{0, 2}, {2, 0}, {}, {}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.lhs.toString() + " x " + c.rhs.toString());
    checkGradients([&](Builder& b, auto& p) { return b.matmul(p[0], p[1], c.dims, "mm"); },
                   {f32(c.lhs), f32(c.rhs)});
  }
}

TEST(Autodiff, SharedValuesAccumulate) {
  // x used three times: the gradient sums all paths.
  checkGradients([](Builder& b, auto& p) { return b.mul(b.add(p[0], p[0]), b.unary(Op::kTanh, p[0])); },
                 {f32({4})});
}

// Every parameter gradient of a whole one-layer model against central differences.
void checkTransformerGradients(const ModelConfig& c) {
  TransformerGraph t = buildTransformer(c);
  std::vector<Node*> grads = appendBackward(*t.graph, t.loss, t.params);
  ReferenceEvaluator ref(*t.graph);
  std::vector<RefTensor> values;
  uint64_t seed = 3;
  for (Node* p : t.params) {
    values.push_back(randomRefTensor(p->type(), seed++, 0.3));
    ref.setInput(p, values.back());
  }
  ref.setInput(t.tokens, randomIndices(t.tokens->type(), 256, 99));
  ref.setInput(t.targets, randomIndices(t.targets->type(), 256, 98));
  ref.run();
  for (size_t p = 0; p < t.params.size(); ++p) {
    SCOPED_TRACE(t.params[p]->name());
    RefTensor analytic = ref.value(grads[p]);
    size_t n = values[p].data.size();
    for (size_t i = 0; i < n; i += std::max<size_t>(1, n / 6)) {
      double x0 = values[p].data[i];
      auto lossAt = [&](double x) {
        values[p].data[i] = x;
        ref.setInput(t.params[p], values[p]);
        ref.run();
        return ref.value(t.loss).data[0];
      };
      double h = 1e-6;
      double numeric = (lossAt(x0 + h) - lossAt(x0 - h)) / (2 * h);
      values[p].data[i] = x0;
      ref.setInput(t.params[p], values[p]);
      EXPECT_NEAR(analytic.data[i], numeric, 1e-6 * std::max(1.0, std::abs(numeric)));
    }
  }
}

ModelConfig oneLayerTiny() {
  ModelConfig c = loadModelConfig("tiny");
  c.n_layers = 1;
  c.batch = 2;
  c.seq_len = 4;
  c.d_model = 8;
  c.n_heads = 2;
  c.d_ff = 16;
  return c;
}

TEST(Autodiff, TinyTransformerAgainstFiniteDifferences) { checkTransformerGradients(oneLayerTiny()); }

// The LLaMA block: rope on q and k, two query heads per kv head, SwiGLU, untied head.
TEST(Autodiff, TinyLlamaBlockAgainstFiniteDifferences) {
  ModelConfig c = oneLayerTiny();
  c.d_model = 16;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.position = Position::kRope;
  c.rope_theta = 100.0;
  c.activation = Activation::kSwiGlu;
  c.tied_embeddings = false;
  checkTransformerGradients(c);
}

TEST(Autodiff, BackwardGemmsNameTheGemmAndOperandTheyDifferentiate) {
  TransformerGraph t = buildTransformer(loadModelConfig("tiny"));
  appendBackward(*t.graph, t.loss, t.params);
  std::map<std::string, const Node*> by_label;
  std::map<int64_t, const Node*> by_id;
  for (const Node* n : t.graph->nodes())
    if (n->op() == Op::kMatMul) {
      by_label[n->attrs().getString(AttrKey::kLabel)] = n;
      if (n->attrs().has(AttrKey::kGemmId)) {
        EXPECT_TRUE(by_id.emplace(n->attrs().getInt(AttrKey::kGemmId), n).second);
      }
    }
  // Which GEMM and operand a backward GEMM differentiates, as structure.
  auto provenance = [&](const std::string& label) {
    const Attrs& a = by_label.at(label)->attrs();
    EXPECT_FALSE(a.has(AttrKey::kGemmId)) << label;
    return std::pair{by_id.at(a.getInt(AttrKey::kGradOf)), a.getOperand(AttrKey::kWrt)};
  };
  EXPECT_EQ(provenance("layer1/mlp/up:dgrad"), std::pair(by_label.at("layer1/mlp/up"), GemmOperand::kLhs));
  EXPECT_EQ(provenance("layer1/mlp/up:wgrad"), std::pair(by_label.at("layer1/mlp/up"), GemmOperand::kRhs));
  EXPECT_EQ(provenance("get_logits:dgrad"), std::pair(by_label.at("get_logits"), GemmOperand::kLhs));
  EXPECT_EQ(provenance("get_logits:wgrad"), std::pair(by_label.at("get_logits"), GemmOperand::kRhs));
  EXPECT_EQ(provenance("layer0/attn/scores:dgrad_lhs"), std::pair(by_label.at("layer0/attn/scores"), GemmOperand::kLhs));
  EXPECT_EQ(provenance("layer0/attn/scores:dgrad_rhs"), std::pair(by_label.at("layer0/attn/scores"), GemmOperand::kRhs));
  // Autodiff records provenance only: directions and roles are tag_metadata's.
  for (const auto& [label, node] : by_label) {
    EXPECT_FALSE(node->attrs().has(AttrKey::kDirection)) << label;
    EXPECT_FALSE(node->attrs().has(AttrKey::kRoles)) << label;
  }
  // 2 layers x (8 forward + 16 backward) + logits (1 + 2); every forward GEMM has an id.
  EXPECT_EQ(by_label.size(), 2u * 24u + 3u);
  EXPECT_EQ(by_id.size(), 2u * 8u + 1u);
  // Outputs: loss, then one gradient per parameter.
  EXPECT_EQ(t.graph->outputs().size(), 1 + t.params.size());
}

TEST(Autodiff, SlicesThatTileAValueJoinTheirGradientsByConcatenation) {
  // q, k, v split from one projection, each used differently, in both orders of use.
  auto split3 = [](Builder& b, auto& p) {
    Node* q = b.slice(p[0], {0, 0}, {3, 2});
    Node* k = b.slice(p[0], {0, 2}, {3, 5});
    Node* v = b.slice(p[0], {0, 5}, {3, 6});
    return b.add(b.reduce(Op::kReduceSum, b.mul(q, q), {1}),
                 b.add(b.reduce(Op::kReduceSum, b.unary(Op::kTanh, k), {1}), b.reduce(Op::kReduceSum, v, {1})));
  };
  checkGradients(split3, {f32({3, 6})});
  Graph g("split");
  Builder b(g);
  std::vector<Node*> p{b.parameter("x", f32({3, 6}))};
  Node* loss = b.reduce(Op::kReduceSum, split3(b, p), {0});
  std::vector<Node*> grads = appendBackward(g, loss, p);
  // The gradient is the concatenation of the three pieces: no zero-filled pads are added.
  EXPECT_EQ(grads[0]->op(), Op::kConcat);
  // Pieces with a gap between them keep their pads.
  Graph gap("gap");
  Builder bg(gap);
  std::vector<Node*> pg{bg.parameter("x", f32({3, 6}))};
  Node* l2 = bg.reduce(Op::kReduceSum, bg.add(bg.slice(pg[0], {0, 0}, {3, 2}), bg.slice(pg[0], {0, 4}, {3, 6})),
                       {0, 1});
  std::vector<Node*> g2 = appendBackward(gap, l2, pg);
  EXPECT_EQ(g2[0]->op(), Op::kAdd);
}

TEST(Autodiff, RejectsNonScalarLossAndSecondDerivatives) {
  Graph g;
  Builder b(g);
  Node* x = b.parameter("x", f32({3}));
  EXPECT_THROW(appendBackward(g, b.unary(Op::kExp, x), std::vector<Node*>{x}), Error);
  Graph g2;
  Builder b2(g2);
  Node* x2 = b2.parameter("x", f32({3}));
  Node* dy = b2.input("dy", f32({3}));
  Node* second = b2.create(Op::kGeluGrad, {x2, dy}, {});
  Node* loss = b2.reduce(Op::kReduceSum, second, {0});
  EXPECT_THROW(appendBackward(g2, loss, std::vector<Node*>{x2}), Error);
}

TEST(Autodiff, UnusedParameterGetsZeroGradient) {
  Graph g;
  Builder b(g);
  Node* x = b.parameter("x", f32({3}));
  Node* unused = b.parameter("unused", f32({2}));
  Node* loss = b.reduce(Op::kReduceSum, b.unary(Op::kExp, x), {0});
  std::vector<Node*> grads = appendBackward(g, loss, std::vector<Node*>{x, unused});
  ReferenceEvaluator ref(g);
  ref.setInput(x, randomRefTensor(x->type(), 1));
  ref.setInput(unused, randomRefTensor(unused->type(), 2));
  ref.run();
  for (double v : ref.value(grads[1]).data) EXPECT_EQ(v, 0.0);
}

}  // namespace
}  // namespace pgq
