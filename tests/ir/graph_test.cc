#include <gtest/gtest.h>

#include "ir/builder.h"
#include "ir/verifier.h"
#include "support/errors.h"

namespace pgq {
namespace {

TEST(Graph, BuilderInfersShapesAndNames) {
  Graph g("g");
  Builder b(g);
  Node* x = b.input("x", {DType::kF32, Shape{4, 8}});
  Node* w = b.parameter("w", {DType::kF32, Shape{8, 16}}, "normal(0.02)");
  Node* y;
  {
    auto scope = b.scope("layer0/mlp");
    y = b.matmul(x, w, DotDims::matrix(), "layer0/mlp/up", "up");
  }
  EXPECT_EQ(y->name(), "layer0/mlp/up");
  EXPECT_EQ(y->shape(), (Shape{4, 16}));
  EXPECT_EQ(y->attrs().getString(AttrKey::kLabel), "layer0/mlp/up");
  // A second node asking for the same name gets a unique one.
  auto scope = b.scope("layer0/mlp");
  Node* y2 = b.matmul(x, w, DotDims::matrix(), "", "up");
  EXPECT_EQ(y2->name(), "layer0/mlp/up.1");
  // An unnamed node gets a fresh name.
  Node* z = b.unary(Op::kExp, y);
  EXPECT_FALSE(z->name().empty());
  EXPECT_NO_THROW(verify(g));
}

TEST(Graph, CreateRejectsBadNodes) {
  Graph g;
  Builder b(g);
  Node* x = b.input("x", {DType::kF32, Shape{4, 8}});
  Node* y = b.input("y", {DType::kF32, Shape{4, 9}});
  EXPECT_THROW(b.add(x, y), Error);                                   // shape mismatch
  EXPECT_THROW(g.create(Op::kAdd, {x}), Error);                       // arity
  EXPECT_THROW(b.matmul(x, y, DotDims::matrix()), Error);             // K mismatch
  EXPECT_THROW(b.transpose(x, {0, 0}), Error);                        // not a permutation
  EXPECT_THROW(b.reshape(x, Shape{5, 7}), Error);                     // element count
  EXPECT_THROW(g.create(Op::kInput, {}, {}, TensorType{DType::kF32, Shape{1}}, "x"),
               Error);                                                // duplicate name
  EXPECT_EQ(b.input("x", {DType::kF32, Shape{1}})->name(), "x.1");    // the builder renames
  Attrs bad;
  bad.set(AttrKey::kPerm, std::vector<int64_t>{1, 0});
  EXPECT_THROW(g.create(Op::kExp, {x}, bad), Error);                  // attribute not allowed
  Node* tokens = b.input("tokens", {DType::kS32, Shape{4}});
  EXPECT_THROW(b.unary(Op::kExp, tokens), Error);                     // needs a float
  // A node of another graph is a programmer error.
  Graph other;
  Node* foreign = Builder(other).input("x", {DType::kF32, Shape{4, 8}});
  EXPECT_THROW(b.add(x, foreign), InternalError);
}

TEST(Graph, ReplaceAllUsesWithMovesUsesAndOutputs) {
  Graph g;
  Builder b(g);
  Node* x = b.input("x", {DType::kF32, Shape{4}});
  Node* e1 = b.unary(Op::kExp, x, "e1");
  Node* e2 = b.unary(Op::kExp, x, "e2");
  Node* s = b.add(e2, e2, "s");
  g.addOutput(e2);
  g.addOutput(s);
  g.replaceAllUsesWith(e2, e1);
  EXPECT_EQ(s->operand(0), e1);
  EXPECT_EQ(s->operand(1), e1);
  EXPECT_EQ(e1->users().size(), 2u);
  EXPECT_TRUE(e2->users().empty());
  EXPECT_EQ(g.outputs()[0], e1);
  EXPECT_NO_THROW(verify(g));
  Node* other = b.input("y", {DType::kF32, Shape{5}});
  EXPECT_THROW(g.replaceAllUsesWith(e1, other), InternalError);  // type differs
}

TEST(Graph, RemoveDeadKeepsInterfaceAndLiveNodes) {
  Graph g;
  Builder b(g);
  Node* x = b.input("x", {DType::kF32, Shape{4}});
  b.parameter("unused_w", {DType::kF32, Shape{4}});
  Node* live = b.unary(Op::kExp, x, "live");
  Node* dead = b.unary(Op::kLog, x, "dead");
  b.unary(Op::kNeg, dead, "dead2");
  g.addOutput(live);
  EXPECT_EQ(g.removeDead(), 2);
  EXPECT_EQ(g.size(), 3u);
  EXPECT_EQ(g.find("dead"), nullptr);
  EXPECT_EQ(x->users().size(), 1u);
  EXPECT_EQ(g.removeDead(), 0);
  EXPECT_NO_THROW(verify(g));
}

TEST(Graph, PostOrderPutsOperandsFirst) {
  Graph g;
  Builder b(g);
  Node* x = b.input("x", {DType::kF32, Shape{4}});
  Node* late_operand = b.unary(Op::kExp, x, "a");
  Node* user = b.unary(Op::kNeg, late_operand, "b");
  Node* replacement = b.unary(Op::kLog, x, "c");  // created after its future user
  g.replaceAllUsesWith(late_operand, replacement);
  g.addOutput(user);
  std::vector<Node*> order = g.postOrder();
  auto pos = [&](Node* n) { return std::find(order.begin(), order.end(), n) - order.begin(); };
  EXPECT_LT(pos(replacement), pos(user));
  EXPECT_LT(pos(x), pos(replacement));
  EXPECT_EQ(order.size(), g.size());
}

TEST(Graph, DeepChainsDoNotOverflowTheStack) {
  Graph g;
  Builder b(g);
  Node* v = b.input("x", {DType::kF32, Shape{2}});
  for (int i = 0; i < 200000; ++i) v = b.unary(Op::kNeg, v);
  g.addOutput(v);
  EXPECT_EQ(g.postOrder().size(), 200001u);
}

TEST(Attrs, KindsAreChecked) {
  Attrs a;
  a.set(AttrKey::kLabel, std::string("x"));
  EXPECT_THROW(a.set(AttrKey::kPerm, std::string("x")), InternalError);
  EXPECT_THROW(a.getInts(AttrKey::kLabel), InternalError);
  EXPECT_THROW(a.getInts(AttrKey::kPerm), InternalError);  // absent
  EXPECT_EQ(a.getIntsOr(AttrKey::kPerm, {7}), std::vector<int64_t>{7});
  Attrs b;
  b.set(AttrKey::kPerm, std::vector<int64_t>{1, 0});
  b.set(AttrKey::kLabel, std::string("x"));
  Attrs c;
  c.set(AttrKey::kLabel, std::string("x"));
  c.set(AttrKey::kPerm, std::vector<int64_t>{1, 0});
  EXPECT_EQ(b, c);  // order of setting does not matter
  EXPECT_EQ(b.hash(), c.hash());
}

}  // namespace
}  // namespace pgq
