#include <cmath>

#include <gtest/gtest.h>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/bf16_gemms.h"
#include "passes/dce.h"
#include "passes/pipeline.h"
#include "passes/quantize_gemms.h"
#include "passes/tag_metadata.h"
#include "runtime/executor.h"
#include "runtime/reference.h"
#include "tests/passes/pass_test_util.h"

namespace pgq {
namespace {

// x feeds two GEMMs; h feeds the third.
const char* kTwoUses = R"(graph @g {
  %x = input() : f32[8,16]
  %wq = parameter() : f32[16,4]
  %wk = parameter() : f32[16,4]
  %q = matmul(%x, %wq) {lhs_contract=[1], rhs_contract=[0], label="q"} : f32[8,4]
  %k = matmul(%x, %wk) {lhs_contract=[1], rhs_contract=[0], label="k"} : f32[8,4]
  %s = matmul(%q, %k) {lhs_contract=[1], rhs_contract=[1], label="scores"} : f32[8,8]
  return %s
}
)";

std::unique_ptr<Graph> converted(const char* text, bool* changed = nullptr) {
  auto g = parseGraph(text);
  Pipeline pipeline;
  pipeline.add(std::make_unique<Bf16Gemms>());
  pipeline.add(std::make_unique<DeadCodeElimination>());
  PassContext ctx;
  bool c = pipeline.run(*g, ctx);
  if (changed) *changed = c;
  return g;
}

TEST(Bf16Gemms, ConvertsF32OperandsOncePerValue) {
  bool changed = false;
  auto g = converted(kTwoUses, &changed);
  EXPECT_TRUE(changed);
  EXPECT_EQ(printGraph(*g), R"(graph @g {
  %x = input() : f32[8,16]
  %wq = parameter() : f32[16,4]
  %wk = parameter() : f32[16,4]
  %x.bf16 = convert(%x) : bf16[8,16]
  %wq.bf16 = convert(%wq) : bf16[16,4]
  %q.bf16 = matmul(%x.bf16, %wq.bf16) {lhs_contract=[1], rhs_contract=[0], label="q"} : f32[8,4]
  %wk.bf16 = convert(%wk) : bf16[16,4]
  %k.bf16 = matmul(%x.bf16, %wk.bf16) {lhs_contract=[1], rhs_contract=[0], label="k"} : f32[8,4]
  %q.bf16.bf16 = convert(%q.bf16) : bf16[8,4]
  %k.bf16.bf16 = convert(%k.bf16) : bf16[8,4]
  %s.bf16 = matmul(%q.bf16.bf16, %k.bf16.bf16) {lhs_contract=[1], rhs_contract=[1], label="scores"} : f32[8,8]
  return %s.bf16
}
)");
  verify(*g);
}

TEST(Bf16Gemms, LeavesBf16AndQuantizedGemmsAlone) {
  // Already converted: nothing to do, twice.
  auto g = converted(kTwoUses);
  std::string before = printGraph(*g);
  PassContext ctx;
  EXPECT_FALSE(Bf16Gemms().run(*g, ctx));
  EXPECT_EQ(printGraph(*g), before);

  // Every GEMM in int8: no f32 matmul is left to convert.
  auto q = parseGraph(kTwoUses);
  Recipe all = parseRecipe(R"(gemms:
  - {match: ".*", decision: int8, lhs_format: "int8:channel:rtn", rhs_format: "int7:channel:rtn"}
)",
                           "r.yaml");
  Pipeline pipeline;
  pipeline.add(std::make_unique<TagMetadata>());
  pipeline.add(std::make_unique<QuantizeGemms>(QuantizeGemmsOptions{.recipe = all}));
  pipeline.add(std::make_unique<DeadCodeElimination>());
  pipeline.run(*q, ctx);
  std::string quantized = printGraph(*q);
  EXPECT_FALSE(Bf16Gemms().run(*q, ctx));
  EXPECT_EQ(printGraph(*q), quantized);
}

// A bf16 GEMM with f32 accumulation is the f32 GEMM of the rounded operands: each
// operand's relative error is at most 2^-9, so the result's stays well below 1e-2.
TEST(Bf16Gemms, ComputesTheF32GemmWithinBf16Rounding) {
  auto original = parseGraph(kTwoUses);
  auto bf16 = converted(kTwoUses);
  Tensor x = toTensor(randomRefTensor({DType::kF32, Shape{8, 16}}, 1));
  Tensor wq = toTensor(randomRefTensor({DType::kF32, Shape{16, 4}}, 2));
  Tensor wk = toTensor(randomRefTensor({DType::kF32, Shape{16, 4}}, 3));
  Executor a(*original), b(*bf16);
  for (Executor* e : {&a, &b}) {
    e->bind("x", x);
    e->bind("wq", wq);
    e->bind("wk", wk);
    e->run();
  }
  double error = testing::relativeSquaredError(a.output<float>(0), b.output<float>(0));
  EXPECT_GT(error, 0.0);  // the operands were rounded
  EXPECT_LT(std::sqrt(error), 1e-2);
}

}  // namespace
}  // namespace pgq
