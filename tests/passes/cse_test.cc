#include <gtest/gtest.h>

#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/pipeline.h"
#include "runtime/reference.h"

namespace pgq {
namespace {

std::string optimize(const std::string& text, const std::string& passes, bool* changed = nullptr) {
  auto g = parseGraph(text);
  PassContext ctx;
  bool c = parsePipeline(passes)->run(*g, ctx);
  if (changed) *changed = c;
  return printGraph(*g);
}

TEST(Cse, MergesDuplicatedSubexpressionChains) {
  bool changed = false;
  std::string out = optimize(R"(graph @g {
  %x = input() : f32[4,8]
  %w = parameter() : f32[8,8]
  %h1 = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="up"} : f32[4,8]
  %a1 = gelu(%h1) : f32[4,8]
  %h2 = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="up"} : f32[4,8]
  %a2 = gelu(%h2) : f32[4,8]
  %s = add(%a1, %a2) : f32[4,8]
  return %s
}
)", "cse,dce", &changed);
  EXPECT_TRUE(changed);
  EXPECT_EQ(out, R"(graph @g {
  %x = input() : f32[4,8]
  %w = parameter() : f32[8,8]
  %h1 = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="up"} : f32[4,8]
  %a1 = gelu(%h1) : f32[4,8]
  %s = add(%a1, %a1) : f32[4,8]
  return %s
}
)");
}

TEST(Cse, KeepsNodesThatDifferInAttributesOperandsOrInterface) {
  const char* text = R"(graph @g {
  %x = input() : f32[4,8]
  %y = input() : f32[4,8]
  %w = parameter() : f32[8,8]
  %w2 = parameter() : f32[8,8]
  %h1 = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="a"} : f32[4,8]
  %h2 = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="b"} : f32[4,8]
  %h3 = matmul(%x, %w2) {lhs_contract=[1], rhs_contract=[0], label="a"} : f32[4,8]
  %d1 = sub(%x, %y) : f32[4,8]
  %d2 = sub(%y, %x) : f32[4,8]
  %c1 = constant() {value=1.0} : f32[]
  %c2 = constant() {value=2.0} : f32[]
  return %h1, %h2, %h3, %d1, %d2, %c1, %c2
}
)";
  bool changed = true;
  EXPECT_EQ(optimize(text, "cse", &changed), text);
  EXPECT_FALSE(changed);
}

TEST(Cse, MergesEqualConstantsAndUpdatesOutputs) {
  bool changed = false;
  std::string out = optimize(R"(graph @g {
  %c1 = constant() {value=0.5} : f32[]
  %c2 = constant() {value=0.5} : f32[]
  return %c1, %c2
}
)", "cse,dce", &changed);
  EXPECT_TRUE(changed);
  EXPECT_EQ(out, R"(graph @g {
  %c1 = constant() {value=0.5} : f32[]
  return %c1, %c1
}
)");
}

// cse,dce on a real training graph (which repeats broadcasts and constants) shrinks it
// and leaves every output unchanged.
TEST(Cse, NumericallyIdenticalOnATrainingGraph) {
  auto build = [] {
    TransformerGraph t = buildTransformer(loadModelConfig("tiny"));
    appendBackward(*t.graph, t.loss, t.params);
    return t;
  };
  TransformerGraph a = build(), b = build();
  PassContext ctx;
  EXPECT_TRUE(parsePipeline("cse,dce")->run(*b.graph, ctx));
  EXPECT_LT(b.graph->size(), a.graph->size());
  ReferenceEvaluator ra(*a.graph), rb(*b.graph);
  uint64_t seed = 1;
  for (const Node* n : a.graph->nodes()) {
    if (n->op() != Op::kParameter && n->op() != Op::kInput) continue;
    RefTensor v = n->dtype() == DType::kS32 ? randomIndices(n->type(), 256, seed++) : randomRefTensor(n->type(), seed++, 0.1);
    ra.setInput(n, v);
    rb.setInput(n->name(), v);
  }
  ra.run();
  rb.run();
  ASSERT_EQ(a.graph->outputs().size(), b.graph->outputs().size());
  for (size_t i = 0; i < a.graph->outputs().size(); ++i) EXPECT_EQ(ra.output(i).data, rb.output(i).data) << i;
}

}  // namespace
}  // namespace pgq
