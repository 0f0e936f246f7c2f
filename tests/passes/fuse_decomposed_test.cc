#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/pipeline.h"
#include "passes/training_pipeline.h"
#include "runtime/reference.h"
#include "tests/passes/pass_test_util.h"

namespace pgq {
namespace {

using testing::count;
using testing::Fused;
using testing::replace;

Fused fuse(const std::string& text) { return testing::fuse(text, "fuse_decomposed,dce"); }

const Node* only(const Graph& g, Op op) {
  for (const Node* node : g.nodes())
    if (node->op() == op) return node;
  return nullptr;
}

// Both graphs on the same random inputs: the fused op computes what the pattern did
// (up to the constants' rounding in the pattern, as exported).
void expectSameValues(const Fused& f) { testing::expectSameValues(f, 1e-6); }

void expectUnchanged(const std::string& text) {
  Fused f = fuse(text);
  EXPECT_FALSE(f.changed);
  EXPECT_EQ(printGraph(*f.after), printGraph(*f.before));
}

// As the ONNX importer writes x * sigmoid(x) (torch's F.silu).
const char* kSilu = R"(graph @g {
  %x = input() : f32[4,8]
  %s = sigmoid(%x) : f32[4,8]
  %y = mul(%x, %s) : f32[4,8]
  %w = parameter() : f32[4,8]
  %o = mul(%y, %w) : f32[4,8]
  return %o
}
)";

TEST(FuseDecomposed, FusesSilu) {
  Fused f = fuse(kSilu);
  EXPECT_TRUE(f.changed);
  EXPECT_EQ(printGraph(*f.after), R"(graph @g {
  %x = input() : f32[4,8]
  %w = parameter() : f32[4,8]
  %silu = silu(%x) : f32[4,8]
  %o = mul(%silu, %w) : f32[4,8]
  return %o
}
)");
  expectSameValues(f);
  // Either operand order.
  EXPECT_EQ(count(*fuse(replace(kSilu, "mul(%x, %s)", "mul(%s, %x)")).after, Op::kSilu), 1);
}

TEST(FuseDecomposed, KeepsSiluWhosePartsAreUsedElsewhere) {
  expectUnchanged(replace(kSilu, "return %o", "return %o, %s"));
  expectUnchanged(replace(replace(kSilu, "sigmoid(%x)", "sigmoid(%w0)"), "%x = input() : f32[4,8]",
                          "%x = input() : f32[4,8]\n  %w0 = input() : f32[4,8]"));
}

TEST(FuseDecomposed, FusesTheResultWhenItIsAGraphOutput) {
  Fused f = fuse(R"(graph @g {
  %x = input() : f32[4,8]
  %s = sigmoid(%x) : f32[4,8]
  %y = mul(%x, %s) : f32[4,8]
  return %y
}
)");
  EXPECT_EQ(count(*f.after, Op::kSilu), 1);
  EXPECT_EQ(f.after->outputs()[0]->op(), Op::kSilu);
  expectSameValues(f);
}

// torch 1.13's GELU(approximate="tanh"): x*x*x, 0.044715 *, x +, sqrt(2/pi) *, tanh,
// 1 +, x *, 0.5 * (constants as exported: f32 roundings).
const char* kGeluTanh = R"(graph @g {
  %x = input() : f32[2,3,8]
  %x2 = mul(%x, %x) : f32[2,3,8]
  %x3 = mul(%x, %x2) : f32[2,3,8]
  %kappa = constant() {value=0.044714998453855515} : f32[2,3,8]
  %kx3 = mul(%kappa, %x3) : f32[2,3,8]
  %in = add(%x, %kx3) : f32[2,3,8]
  %beta = constant() {value=0.7978845834732056} : f32[2,3,8]
  %arg = mul(%beta, %in) : f32[2,3,8]
  %t = tanh(%arg) : f32[2,3,8]
  %one = constant() {value=1.0} : f32[2,3,8]
  %t1 = add(%one, %t) : f32[2,3,8]
  %xt = mul(%x, %t1) : f32[2,3,8]
  %half = constant() {value=0.5} : f32[2,3,8]
  %y = mul(%half, %xt) : f32[2,3,8]
  return %y
}
)";

TEST(FuseDecomposed, FusesTanhGelu) {
  Fused f = fuse(kGeluTanh);
  EXPECT_TRUE(f.changed);
  EXPECT_EQ(count(*f.after, Op::kGelu), 1);
  EXPECT_EQ(f.after->size(), 2u);  // x and gelu(x)
  expectSameValues(f);
}

TEST(FuseDecomposed, FusesTanhGeluInOtherOrdersAndWithBroadcastScalars) {
  // 0.5 * x first, x^3 as (x*x)*x, constants on the right and broadcast from rank 0.
  Fused f = fuse(R"(graph @g {
  %x = input() : f32[2,3,8]
  %x2 = mul(%x, %x) : f32[2,3,8]
  %x3 = mul(%x2, %x) : f32[2,3,8]
  %k0 = constant() {value=0.044715} : f32[]
  %kappa = broadcast(%k0) {dims=[]} : f32[2,3,8]
  %kx3 = mul(%x3, %kappa) : f32[2,3,8]
  %in = add(%kx3, %x) : f32[2,3,8]
  %beta = constant() {value=0.79788456} : f32[2,3,8]
  %arg = mul(%in, %beta) : f32[2,3,8]
  %t = tanh(%arg) : f32[2,3,8]
  %one = constant() {value=1.0} : f32[2,3,8]
  %t1 = add(%t, %one) : f32[2,3,8]
  %h0 = constant() {value=0.5} : f32[]
  %half = broadcast(%h0) {dims=[]} : f32[2,3,8]
  %hx = mul(%half, %x) : f32[2,3,8]
  %y = mul(%hx, %t1) : f32[2,3,8]
  return %y
}
)");
  EXPECT_EQ(count(*f.after, Op::kGelu), 1) << printGraph(*f.after);
  EXPECT_EQ(f.after->size(), 2u);
  expectSameValues(f);
}

TEST(FuseDecomposed, KeepsTanhGeluWithOtherUsersOrWrongConstants) {
  expectUnchanged(replace(kGeluTanh, "return %y", "return %y, %t"));
  expectUnchanged(replace(kGeluTanh, "return %y", "return %y, %x3"));
  expectUnchanged(replace(kGeluTanh, "0.044714998453855515", "0.0447"));
  expectUnchanged(replace(kGeluTanh, "0.7978845834732056", "0.79"));
  expectUnchanged(replace(kGeluTanh, "value=0.5", "value=0.25"));
  expectUnchanged(replace(kGeluTanh, "value=1.0", "value=2.0"));
  expectUnchanged(replace(kGeluTanh, "tanh(%arg)", "sigmoid(%arg)"));
}

// torch 1.13's exact GELU: x / 1.4142135, erf, + 1, x *, * 0.5.
const char* kGeluErf = R"(graph @g {
  %x = input() : f32[2,3,8]
  %r2 = constant() {value=1.4142135381698608} : f32[2,3,8]
  %d = div(%x, %r2) : f32[2,3,8]
  %e = erf(%d) : f32[2,3,8]
  %one = constant() {value=1.0} : f32[2,3,8]
  %e1 = add(%e, %one) : f32[2,3,8]
  %xe = mul(%x, %e1) : f32[2,3,8]
  %half = constant() {value=0.5} : f32[2,3,8]
  %y = mul(%xe, %half) : f32[2,3,8]
  return %y
}
)";

TEST(FuseDecomposed, FusesErfGelu) {
  Fused f = fuse(kGeluErf);
  EXPECT_TRUE(f.changed);
  EXPECT_EQ(count(*f.after, Op::kGeluErf), 1);
  EXPECT_EQ(f.after->size(), 2u);
  expectSameValues(f);
  // x * (1/sqrt 2) instead of x / sqrt 2.
  Fused g = fuse(replace(replace(kGeluErf, "1.4142135381698608", "0.70710678"), "div(%x, %r2)", "mul(%r2, %x)"));
  EXPECT_EQ(count(*g.after, Op::kGeluErf), 1);
  expectSameValues(g);
}

TEST(FuseDecomposed, KeepsErfGeluWithOtherUsersOrWrongConstants) {
  expectUnchanged(replace(kGeluErf, "return %y", "return %y, %e1"));
  expectUnchanged(replace(kGeluErf, "return %y", "return %y, %xe"));
  expectUnchanged(replace(kGeluErf, "1.4142135381698608", "1.5"));
  expectUnchanged(replace(kGeluErf, "value=0.5", "value=0.5001"));
  expectUnchanged(replace(kGeluErf, "erf(%d)", "tanh(%d)"));
}

// torch's x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) as imported: the mean is
// reshaped to keepdims form, and broadcast back through a reshape.
const char* kRmsNorm = R"(graph @g {
  %x = input() : f32[2,3,8]
  %sq = mul(%x, %x) : f32[2,3,8]
  %m = reduce_mean(%sq) {axes=[2]} : f32[2,3]
  %mk = reshape(%m) : f32[2,3,1]
  %eps = constant() {value=0.001} : f32[2,3,1]
  %a = add(%mk, %eps) : f32[2,3,1]
  %r = rsqrt(%a) : f32[2,3,1]
  %rr = reshape(%r) : f32[2,3]
  %rb = broadcast(%rr) {dims=[0,1]} : f32[2,3,8]
  %y = mul(%x, %rb) : f32[2,3,8]
  %w = parameter() : f32[2,3,8]
  %o = mul(%y, %w) : f32[2,3,8]
  return %o
}
)";

TEST(FuseDecomposed, FusesRmsNorm) {
  Fused f = fuse(kRmsNorm);
  EXPECT_TRUE(f.changed);
  const Node* n = only(*f.after, Op::kRmsNorm);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->attrs().getFloat(AttrKey::kEps), 0.001);
  EXPECT_EQ(f.after->size(), 4u);  // x, rms_norm, w and the weight's mul
  expectSameValues(f);
}

TEST(FuseDecomposed, FusesRmsNormSpelledWithSqrt) {
  // x / sqrt(..)
  std::string div = replace(kRmsNorm, "rsqrt(%a)", "sqrt(%a)");
  div = replace(div, "mul(%x, %rb)", "div(%x, %rb)");
  // x * (1 / sqrt(..)), as Reciprocal and Pow(-1) import; eps on the left.
  std::string recip = replace(kRmsNorm, "%r = rsqrt(%a) : f32[2,3,1]",
                              "%s = sqrt(%a) : f32[2,3,1]\n  %one = constant() {value=1.0} : f32[2,3,1]\n"
                              "  %r = div(%one, %s) : f32[2,3,1]");
  recip = replace(recip, "add(%mk, %eps)", "add(%eps, %mk)");
  recip = replace(recip, "mul(%x, %rb)", "mul(%rb, %x)");
  for (const std::string& text : {div, recip}) {
    Fused f = fuse(text);
    EXPECT_EQ(count(*f.after, Op::kRmsNorm), 1) << text;
    EXPECT_EQ(f.after->size(), 4u);
    expectSameValues(f);
  }
}

TEST(FuseDecomposed, KeepsRmsNormWithOtherUsersOrWrongStructure) {
  expectUnchanged(replace(kRmsNorm, "return %o", "return %o, %m"));
  expectUnchanged(replace(kRmsNorm, "return %o", "return %o, %r"));
  expectUnchanged(replace(kRmsNorm, "return %o", "return %o, %rb"));
  expectUnchanged(replace(kRmsNorm, "return %o", "return %o, %sq"));
  // Not 1 / sqrt(..), mean(x * x) of another value, a mean over another dim.
  expectUnchanged(replace(kRmsNorm, "%r = rsqrt(%a) : f32[2,3,1]",
                          "%s = sqrt(%a) : f32[2,3,1]\n  %two = constant() {value=2.0} : f32[2,3,1]\n"
                          "  %r = div(%two, %s) : f32[2,3,1]"));
  expectUnchanged(replace(replace(kRmsNorm, "mul(%x, %x)", "mul(%z, %z)"), "%x = input() : f32[2,3,8]",
                          "%x = input() : f32[2,3,8]\n  %z = input() : f32[2,3,8]"));
  expectUnchanged(R"(graph @g {
  %x = input() : f32[8,8]
  %sq = mul(%x, %x) : f32[8,8]
  %m = reduce_mean(%sq) {axes=[0]} : f32[8]
  %eps = constant() {value=0.001} : f32[8]
  %a = add(%m, %eps) : f32[8]
  %r = rsqrt(%a) : f32[8]
  %rb = broadcast(%r) {dims=[1]} : f32[8,8]
  %y = mul(%x, %rb) : f32[8,8]
  return %y
}
)");
  // The row value broadcast along a leading dim instead of the last.
  expectUnchanged(R"(graph @g {
  %x = input() : f32[8,8]
  %sq = mul(%x, %x) : f32[8,8]
  %m = reduce_mean(%sq) {axes=[1]} : f32[8]
  %eps = constant() {value=0.001} : f32[8]
  %a = add(%m, %eps) : f32[8]
  %r = rsqrt(%a) : f32[8]
  %rb = broadcast(%r) {dims=[1]} : f32[8,8]
  %y = mul(%x, %rb) : f32[8,8]
  return %y
}
)");
}

// torch's LayerNorm before opset 17 (Pow as x * x; keepdims reshapes as imported).
const char* kLayerNorm = R"(graph @g {
  %x = input() : f32[2,3,8]
  %m = reduce_mean(%x) {axes=[2]} : f32[2,3]
  %mb = broadcast(%m) {dims=[0,1]} : f32[2,3,8]
  %d = sub(%x, %mb) : f32[2,3,8]
  %dd = mul(%d, %d) : f32[2,3,8]
  %v = reduce_mean(%dd) {axes=[2]} : f32[2,3]
  %vk = reshape(%v) : f32[2,3,1]
  %eps = constant() {value=1e-05} : f32[2,3,1]
  %a = add(%vk, %eps) : f32[2,3,1]
  %s = sqrt(%a) : f32[2,3,1]
  %sr = reshape(%s) : f32[2,3]
  %sb = broadcast(%sr) {dims=[0,1]} : f32[2,3,8]
  %y = div(%d, %sb) : f32[2,3,8]
  %w = parameter() : f32[2,3,8]
  %b = parameter() : f32[2,3,8]
  %yw = mul(%y, %w) : f32[2,3,8]
  %o = add(%yw, %b) : f32[2,3,8]
  return %o
}
)";

TEST(FuseDecomposed, FusesLayerNorm) {
  Fused f = fuse(kLayerNorm);
  EXPECT_TRUE(f.changed);
  const Node* n = only(*f.after, Op::kLayerNorm);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->operand(0)->name(), "x");
  EXPECT_DOUBLE_EQ(n->attrs().getFloat(AttrKey::kEps), 1e-5);
  EXPECT_EQ(f.after->size(), 6u);  // x, layer_norm, w, b, mul, add
  expectSameValues(f);
}

TEST(FuseDecomposed, FusesWhatIsOwnedOfALayerNorm) {
  // When x - mean(x) is used elsewhere, the rest is still rms_norm(x - mean(x)).
  for (const char* other : {"%d", "%mb"}) {
    Fused f = fuse(replace(kLayerNorm, "return %o", std::string("return %o, ") + other));
    EXPECT_EQ(count(*f.after, Op::kLayerNorm), 0);
    const Node* n = only(*f.after, Op::kRmsNorm);
    ASSERT_NE(n, nullptr) << other;
    EXPECT_EQ(n->operand(0)->name(), "d");
    expectSameValues(f);
  }
}

TEST(FuseDecomposed, KeepsLayerNormWithOtherUsersOrWrongConstants) {
  expectUnchanged(replace(kLayerNorm, "return %o", "return %o, %v"));
  expectUnchanged(replace(kLayerNorm, "return %o", "return %o, %s"));
  expectUnchanged(replace(kLayerNorm, "value=1e-05", "value=0.0"));  // eps must be > 0
  expectUnchanged(replace(kLayerNorm, "value=1e-05", "value=-1.0"));
}

TEST(FuseDecomposed, ChangesNoBuiltInModel) {
  for (const char* spec : {"tiny", "small", PGQ_SOURCE_DIR "/tests/parity/tiny_layernorm_relu_untied.yaml"}) {
    TransformerGraph t = buildTransformer(loadModelConfig(spec));
    const std::string before = printGraph(*t.graph);
    PassContext ctx;
    EXPECT_FALSE(parsePipeline("fuse_decomposed,dce")->run(*t.graph, ctx)) << spec;
    EXPECT_EQ(printGraph(*t.graph), before) << spec;
  }
}

}  // namespace
}  // namespace pgq
