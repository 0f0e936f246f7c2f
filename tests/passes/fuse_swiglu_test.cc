#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/pipeline.h"
#include "runtime/reference.h"
#include "tests/passes/pass_test_util.h"

namespace pgq {
namespace {

using testing::count;
using testing::replace;

// LLaMA's MLP activation as the transformer builder writes it, and a loss to
// differentiate.
const char* kMlp = R"(graph @g {
  %gate = parameter() : f32[4,6]
  %up = parameter() : f32[4,6]
  %gate_act = silu(%gate) : f32[4,6]
  %act = mul(%gate_act, %up) : f32[4,6]
  %w = parameter() : f32[4,6]
  %o = mul(%act, %w) : f32[4,6]
  %loss = reduce_sum(%o) {axes=[0,1]} : f32[]
  return %loss
}
)";

std::unique_ptr<Graph> fused(const std::string& text, bool* changed = nullptr) {
  testing::Fused f = testing::fuse(text, "fuse_swiglu,dce");
  if (changed) *changed = f.changed;
  return std::move(f.after);
}

// The loss and every parameter's gradient (autodiff) of a graph, in f64.
std::vector<std::vector<double>> lossAndGradients(Graph& g) {
  std::vector<Node*> params;
  for (Node* n : g.nodes())
    if (n->op() == Op::kParameter) params.push_back(n);
  appendBackward(g, g.outputs()[0], params);
  ReferenceEvaluator r(g);
  uint64_t seed = 3;
  for (Node* n : params) r.setInput(n, randomRefTensor(n->type(), seed++));
  r.run();
  std::vector<std::vector<double>> out;
  for (size_t i = 0; i < g.outputs().size(); ++i) out.push_back(r.output(i).data);
  return out;
}

TEST(FuseSwiglu, FusesTheMlpActivationAndItsGradients) {
  bool changed = false;
  auto g = fused(kMlp, &changed);
  EXPECT_TRUE(changed);
  EXPECT_EQ(printGraph(*g), R"(graph @g {
  %gate = parameter() : f32[4,6]
  %up = parameter() : f32[4,6]
  %w = parameter() : f32[4,6]
  %swiglu = swiglu(%gate, %up) : f32[4,6]
  %o = mul(%swiglu, %w) : f32[4,6]
  %loss = reduce_sum(%o) {axes=[0,1]} : f32[]
  return %loss
}
)");
  auto plain = parseGraph(kMlp);
  const auto want = lossAndGradients(*plain);
  const auto got = lossAndGradients(*g);
  EXPECT_EQ(count(*g, Op::kSwigluGrad), 2);  // one per operand
  EXPECT_EQ(count(*g, Op::kSiluGrad), 0);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t j = 0; j < want[i].size(); ++j) ASSERT_NEAR(got[i][j], want[i][j], 1e-12 * (1 + std::abs(want[i][j])));
  // The silu on the right.
  EXPECT_EQ(count(*fused(replace(kMlp, "mul(%gate_act, %up)", "mul(%up, %gate_act)")), Op::kSwiglu), 1);
}

TEST(FuseSwiglu, KeepsASiluOthersUse) {
  bool changed = true;
  auto g = fused(replace(kMlp, "return %loss", "return %loss, %gate_act"), &changed);
  EXPECT_FALSE(changed);
  EXPECT_EQ(count(*g, Op::kSwiglu), 0);
  auto twice = fused(replace(kMlp, "%o = mul(%act, %w)", "%o = mul(%act, %gate_act)"), &changed);
  EXPECT_FALSE(changed);
}

// The gradient with respect to one operand only: the other's is not built.
TEST(FuseSwiglu, DifferentiatesOnlyWhatNeedsIt) {
  auto g = fused(replace(kMlp, "%up = parameter()", "%up = input()"));
  std::vector<Node*> params;
  for (Node* n : g->nodes())
    if (n->op() == Op::kParameter) params.push_back(n);
  appendBackward(*g, g->outputs()[0], params);
  ASSERT_EQ(count(*g, Op::kSwigluGrad), 1);
  for (const Node* n : g->nodes()) {
    if (n->op() == Op::kSwigluGrad) {
      EXPECT_EQ(n->attrs().getOperand(AttrKey::kWrt), GemmOperand::kLhs);
    }
  }
}

TEST(FuseSwiglu, FusesEveryLlamaMlpAndNoOtherActivation) {
  for (const char* spec : {"tiny", "small", "medium", PGQ_SOURCE_DIR "/tests/parity/tiny_llama.yaml"}) {
    SCOPED_TRACE(spec);
    const ModelConfig config = loadModelConfig(spec);
    TransformerGraph t = buildTransformer(config);
    const int silus = count(*t.graph, Op::kSilu);
    PassContext ctx;
    EXPECT_EQ(parsePipeline("fuse_swiglu,dce")->run(*t.graph, ctx), silus > 0);
    EXPECT_EQ(count(*t.graph, Op::kSwiglu), silus);
    EXPECT_EQ(count(*t.graph, Op::kSilu), 0);
    EXPECT_EQ(silus, config.activation == Activation::kSwiGlu ? config.n_layers : 0);
  }
}

}  // namespace
}  // namespace pgq
