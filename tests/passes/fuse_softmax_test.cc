#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "frontend/transformer.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/pipeline.h"
#include "runtime/reference.h"
#include "tests/passes/pass_test_util.h"

namespace pgq {
namespace {

using testing::count;
using testing::Fused;
using testing::replace;

Fused fuse(const std::string& text) { return testing::fuse(text, "fuse_softmax,dce"); }

// The fused softmax and its gradient compute what the pattern did (in f64).
void expectSameValues(const Fused& f) { testing::expectSameValues(f, 1e-12); }

// An attention's scores as the transformer builder writes them, a [2, 3, 5] query block
// against 5 keys; `dy` stands for the gradient arriving at the probabilities, and the
// graph returns the probabilities and the scores' gradient written out by hand
// (softmax_grad, the mask's 0, the scale), as autodiff writes it.
const char* kAttention = R"(graph @g {
  %x = input() : f32[2,3,5]
  %dy = input() : f32[2,3,5]
  %c = constant() {value=0.125} : f32[]
  %cb = broadcast(%c) {dims=[]} : f32[2,3,5]
  %scaled = mul(%x, %cb) : f32[2,3,5]
  %masked = causal_mask(%scaled) {value=-inf} : f32[2,3,5]
  %probs = softmax(%masked) : f32[2,3,5]
  %w = parameter() : f32[2,3,5]
  %o = mul(%probs, %w) : f32[2,3,5]
  return %o
}
)";

TEST(FuseSoftmax, TakesTheScaleAndTheCausalMaskIntoTheSoftmax) {
  Fused f = fuse(kAttention);
  EXPECT_TRUE(f.changed);
  EXPECT_EQ(printGraph(*f.after), R"(graph @g {
  %x = input() : f32[2,3,5]
  %dy = input() : f32[2,3,5]
  %w = parameter() : f32[2,3,5]
  %softmax = softmax(%x) {scale=0.125, causal=-inf} : f32[2,3,5]
  %o = mul(%softmax, %w) : f32[2,3,5]
  return %o
}
)");
  expectSameValues(f);
  // The splat on the left, as a reshape of a constant; a finite fill.
  Fused left = fuse(replace(replace(kAttention, "mul(%x, %cb)", "mul(%cb, %x)"), "{value=-inf}", "{value=-10000.0}"));
  EXPECT_EQ(count(*left.after, Op::kSoftmax), 1);
  EXPECT_EQ(count(*left.after, Op::kMul), 1);
  EXPECT_EQ(count(*left.after, Op::kCausalMask), 0);
  expectSameValues(left);
  // Running it again changes nothing.
  PassContext ctx;
  EXPECT_FALSE(parsePipeline("fuse_softmax")->run(*f.after, ctx));
}

TEST(FuseSoftmax, FusesAMaskOrAScaleAlone) {
  Fused mask = fuse(replace(kAttention, "causal_mask(%scaled)", "causal_mask(%x)"));
  EXPECT_NE(printGraph(*mask.after).find("softmax(%x) {causal=-inf}"), std::string::npos) << printGraph(*mask.after);
  expectSameValues(mask);
  Fused scale = fuse(replace(replace(kAttention, "  %masked = causal_mask(%scaled) {value=-inf} : f32[2,3,5]\n", ""),
                             "softmax(%masked)", "softmax(%scaled)"));
  EXPECT_NE(printGraph(*scale.after).find("softmax(%x) {scale=0.125}"), std::string::npos) << printGraph(*scale.after);
  expectSameValues(scale);
}

// The gradient: softmax_grad takes the softmax's scale and mask, and equals the
// unfused graph's gradient (autodiff of both, reference values).
TEST(FuseSoftmax, TheGradientTakesThePrologueToo) {
  const std::string grad = replace(kAttention, "return %o", R"(%sg = softmax_grad(%probs, %dy) : f32[2,3,5]
  %mg = causal_mask(%sg) {value=0.0} : f32[2,3,5]
  %dx = mul(%mg, %cb) : f32[2,3,5]
  %fsg = softmax_grad(%probs, %dy) {scale=0.125, causal=-inf} : f32[2,3,5]
  return %dx, %fsg)");
  auto g = parseGraph(grad);
  ReferenceEvaluator r(*g);
  uint64_t seed = 1;
  for (const Node* n : g->nodes())
    if (n->op() == Op::kParameter || n->op() == Op::kInput) r.setInput(n, randomRefTensor(n->type(), seed++));
  r.run();
  const std::vector<double>& a = r.output(0).data;
  const std::vector<double>& b = r.output(1).data;
  ASSERT_EQ(a.size(), b.size());
  int zeros = 0;
  for (size_t j = 0; j < a.size(); ++j) {
    ASSERT_NEAR(a[j], b[j], 1e-15) << j;
    zeros += b[j] == 0.0;
  }
  EXPECT_EQ(zeros, 2 * (2 + 1 + 0));  // the masked keys of each [3, 5] block (queries = the last 3 keys)
}

TEST(FuseSoftmax, KeepsWhatOthersUse) {
  // The mask or the scaled scores used elsewhere or returned: nothing fuses past them.
  Fused masked_used = fuse(replace(kAttention, "return %o", "return %o, %masked"));
  EXPECT_NE(printGraph(*masked_used.after).find("softmax(%masked)"), std::string::npos);
  Fused scaled_used = fuse(replace(kAttention, "return %o", "return %o, %scaled"));
  EXPECT_NE(printGraph(*scaled_used.after).find("softmax(%scaled) {causal=-inf}"), std::string::npos)
      << printGraph(*scaled_used.after);
  expectSameValues(scaled_used);
  // A mul by a value that is not a splat stays, and so does a softmax with a prologue.
  Fused not_splat = fuse(replace(kAttention, "mul(%x, %cb)", "mul(%x, %dy)"));
  EXPECT_EQ(count(*not_splat.after, Op::kMul), 2);
  EXPECT_NE(printGraph(*not_splat.after).find("softmax(%scaled) {causal=-inf}"), std::string::npos);
  const std::string fused_already = replace(kAttention, "softmax(%masked)", "softmax(%masked) {scale=2.0}");
  Fused again = fuse(fused_already);
  EXPECT_FALSE(again.changed);
}

// Every built-in attention gets the fused softmax: no mask or scale pass is left.
TEST(FuseSoftmax, FusesEveryBuiltInAttention) {
  for (const char* spec : {"tiny", "small", PGQ_SOURCE_DIR "/tests/parity/tiny_llama.yaml"}) {
    SCOPED_TRACE(spec);
    TransformerGraph t = buildTransformer(loadModelConfig(spec));
    const int softmaxes = count(*t.graph, Op::kSoftmax);
    ASSERT_GT(softmaxes, 0);
    PassContext ctx;
    EXPECT_TRUE(parsePipeline("fuse_softmax,dce")->run(*t.graph, ctx));
    EXPECT_EQ(count(*t.graph, Op::kCausalMask), 0);
    int fused = 0;
    for (const Node* n : t.graph->nodes())
      fused += n->op() == Op::kSoftmax && n->attrs().has(AttrKey::kScale) && n->attrs().has(AttrKey::kCausal);
    EXPECT_EQ(fused, softmaxes);
  }
}

}  // namespace
}  // namespace pgq
