#include <cmath>
#include <functional>

#include <fmt/format.h>

#include <gtest/gtest.h>

#include "ir/parser.h"
#include "ir/printer.h"
#include "kernels/convert.h"
#include "kernels/quant_format.h"
#include "kernels/quant_stats.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/estimate_speedup.h"
#include "passes/pipeline.h"
#include "passes/quantize_gemms.h"
#include "passes/tag_metadata.h"
#include "plan/recipe.h"
#include "runtime/executor.h"
#include "runtime/reference.h"
#include "support/errors.h"
#include "tests/passes/pass_test_util.h"

namespace pgq {
namespace {

using testing::kMlp;

Recipe upOnly() {
  return parseRecipe(R"(gemms:
  - {label: up, decision: int8, lhs_format: "int8:channel:rtn", rhs_format: "int7:channel:rtn"}
  - {label: down, decision: keep}
)",
                     "r.yaml");
}

std::unique_ptr<Graph> rewritten(const char* text, const Recipe& recipe, bool* changed = nullptr) {
  auto g = parseGraph(text);
  Pipeline pipeline;
  pipeline.add(std::make_unique<TagMetadata>());
  pipeline.add(std::make_unique<QuantizeGemms>(QuantizeGemmsOptions{.recipe = recipe}));
  pipeline.add(std::make_unique<DeadCodeElimination>());
  PassContext ctx;
  bool c = pipeline.run(*g, ctx);
  if (changed) *changed = c;
  return g;
}

TEST(QuantizeGemms, RewritesTheChosenGemm) {
  bool changed = false;
  auto g = rewritten(kMlp, upOnly(), &changed);
  EXPECT_TRUE(changed);
  std::string text = printGraph(*g);
  EXPECT_NE(text.find(R"(%h.lhs_scales = quant_params(%x) {format="int8:channel:rtn", side="lhs", contract_dims=[1]} : f32[64])"),
            std::string::npos) << text;
  EXPECT_NE(text.find(R"(%h.lhs_q = quantize(%x, %h.lhs_scales) {format="int8:channel:rtn", side="lhs", contract_dims=[1], seed=0} : u8[64,32])"),
            std::string::npos) << text;
  EXPECT_NE(text.find(R"(%h.rhs_q = quantize(%w, %h.rhs_scales) {format="int7:channel:rtn", side="rhs", contract_dims=[0], seed=0} : s8[32,48])"),
            std::string::npos) << text;
  EXPECT_NE(text.find(R"(%h.int8 = qmatmul(%h.lhs_q, %h.rhs_q, %h.lhs_scales, %h.rhs_scales) {lhs_contract=[1], rhs_contract=[0], label="up")"),
            std::string::npos) << text;
  int qmatmuls = 0, matmuls = 0;
  for (const Node* n : g->nodes()) {
    qmatmuls += n->op() == Op::kQMatMul;
    matmuls += n->op() == Op::kMatMul;
  }
  EXPECT_EQ(qmatmuls, 1);
  EXPECT_EQ(matmuls, 1);  // down stays f32
  // The text form of a rewritten graph round-trips.
  EXPECT_EQ(printGraph(*parseGraph(text)), text);
}

// Two GEMMs reading one value (q and k of one input) in the same round-to-nearest format
// quantize it once after cse; in stochastic rounding each keeps its own stream.
TEST(QuantizeGemms, EqualRoundToNearestQuantizationsMerge) {
  const char* text = R"(graph @qk {
  %x = input() : f32[64,32]
  %wq = parameter() : f32[32,48]
  %wk = parameter() : f32[32,48]
  %q = matmul(%x, %wq) {lhs_contract=[1], rhs_contract=[0], label="q"} : f32[64,48]
  %k = matmul(%x, %wk) {lhs_contract=[1], rhs_contract=[0], label="k"} : f32[64,48]
  return %q, %k
}
)";
  auto count = [&](const char* lhs) {
    auto g = parseGraph(text);
    Pipeline pipeline;
    pipeline.add(std::make_unique<TagMetadata>());
    pipeline.add(std::make_unique<QuantizeGemms>(QuantizeGemmsOptions{
        .recipe = parseRecipe(fmt::format("gemms:\n  - {{match: \".*\", decision: int8, lhs_format: \"{}\", "
                                          "rhs_format: \"int8:channel:rtn\"}}\n",
                                          lhs),
                              "r.yaml")}));
    pipeline.add(std::make_unique<CommonSubexpressionElimination>());
    pipeline.add(std::make_unique<DeadCodeElimination>());
    PassContext ctx;
    pipeline.run(*g, ctx);
    int quantizes = 0;
    for (const Node* n : g->nodes()) quantizes += n->op() == Op::kQuantize;
    return quantizes;
  };
  EXPECT_EQ(count("int8:channel:rtn"), 3);  // x once, each weight once
  EXPECT_EQ(count("int8:channel:sr"), 4);
}

TEST(QuantizeGemms, NoChangeWithARecipeThatKeepsEverything) {
  Recipe keep = parseRecipe("gemms:\n  - {match: \".*\", decision: keep}\n", "r.yaml");
  auto g = parseGraph(kMlp);
  PassContext ctx;
  TagMetadata().run(*g, ctx);
  std::string before = printGraph(*g);
  EXPECT_FALSE(QuantizeGemms({.recipe = keep}).run(*g, ctx));
  EXPECT_EQ(printGraph(*g), before);
  EXPECT_THROW(QuantizeGemms({}).run(*g, ctx), Error);  // no recipe at all is a user error
}

// Whether int8 pays off is decided when the recipe is made; the rewrite applies the
// recipe as written, even where the roofline estimates int8 slower.
TEST(QuantizeGemms, AppliesTheRecipeWhateverTheEstimate) {
  HardwareModel slow_int8 = loadHardwareModel("epyc-zen3-2c");
  slow_int8.gemm_int8 = slow_int8.gemm_f32 / 100;
  auto g = parseGraph(kMlp);
  PassContext ctx;
  TagMetadata().run(*g, ctx);
  EstimateSpeedup({.hardware = slow_int8}).run(*g, ctx);
  ASSERT_LT(g->find("h")->attrs().getFloat(AttrKey::kEstSpeedup), 1.0);
  EXPECT_TRUE(QuantizeGemms({.recipe = upOnly()}).run(*g, ctx));
  EXPECT_NE(g->find("h.int8"), nullptr);
}

// The rewritten GEMM's error against the f32 one is what the operands' SQNRs predict:
// with independent errors 1/SQNR_C ~ 1/SQNR_A + 1/SQNR_B.
TEST(QuantizeGemms, ErrorMatchesTheSqnrPrediction) {
  for (const char* lhs_fmt : {"int8:channel:rtn", "int6:channel:rtn", "int8:channel:sr", "int8:block16:rtn"}) {
    SCOPED_TRACE(lhs_fmt);
    Recipe recipe = parseRecipe(fmt::format(R"(gemms:
  - {{label: up, decision: int8, lhs_format: "{}", rhs_format: "int7:channel:rtn"}}
)",
                                            lhs_fmt),
                                "r.yaml");
    auto original = parseGraph(kMlp);
    auto quantized = rewritten(kMlp, recipe);
    Tensor x = toTensor(randomRefTensor({DType::kF32, Shape{64, 32}}, 1));
    Tensor w = toTensor(randomRefTensor({DType::kF32, Shape{32, 48}}, 2));
    Tensor w2 = toTensor(randomRefTensor({DType::kF32, Shape{48, 32}}, 3));
    Executor a(*original), b(*quantized);
    for (Executor* e : {&a, &b}) {
      e->bind("x", x);
      e->bind("w", w);
      e->bind("w2", w2);
      e->run(5);
    }
    double error = testing::relativeSquaredError(a.output<float>(0), b.output<float>(0));
    double sqnr_a = kernels::quantStats({x.data<float>(), 64 * 32}, {1, 64, 32, true}, kernels::QuantFormat::parse(lhs_fmt), {0, 5}).sqnr;
    double sqnr_b = kernels::quantStats({w.data<float>(), 32 * 48}, {1, 32, 48, false}, kernels::QuantFormat::parse("int7:channel:rtn")).sqnr;
    double predicted = 1 / sqnr_a + 1 / sqnr_b;
    // The second GEMM is exact in both, so the relative error of y is that of h.
    EXPECT_GT(error, 0.3 * predicted);
    EXPECT_LT(error, 3.0 * predicted);
  }
}

TEST(QuantizeGemms, PermutesOperandsTheKernelCannotReadAndQuantizesBf16Sources) {
  const char* text = R"(graph @g {
  %x = input() : f32[5,2,7]
  %w = parameter() : f32[2,7,3]
  %y = matmul(%x, %w) {lhs_contract=[2], rhs_contract=[1], lhs_batch=[1], rhs_batch=[0], label="bmm"} : f32[2,5,3]
  %xb = convert(%x) : bf16[5,2,7]
  %wb = convert(%w) : bf16[2,7,3]
  %z = matmul(%xb, %wb) {lhs_contract=[2], rhs_contract=[1], lhs_batch=[1], rhs_batch=[0], label="bmm_bf16"} : f32[2,5,3]
  return %y, %z
}
)";
  Recipe recipe = parseRecipe(R"(gemms:
  - {match: ".*", decision: int8, lhs_format: "int8:channel:rtn", rhs_format: "int7:channel:rtn"}
)",
                              "r.yaml");
  auto g = rewritten(text, recipe);
  std::string out = printGraph(*g);
  EXPECT_NE(out.find(R"(%y.lhs_t = transpose(%x) {perm=[1,0,2]} : f32[2,5,7])"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(%z.lhs_t = transpose(%x) {perm=[1,0,2]})"), std::string::npos) << out;  // f32 source
  // Both run, and quantizing the f32 source makes them compute the same thing.
  Executor e(*g);
  Tensor x = toTensor(randomRefTensor({DType::kF32, Shape{5, 2, 7}}, 4));
  Tensor w = toTensor(randomRefTensor({DType::kF32, Shape{2, 7, 3}}, 5));
  e.bind("x", x);
  e.bind("w", w);
  e.run();
  std::span<const float> y = e.output<float>(0), z = e.output<float>(1);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], z[i]);
}

// SmoothQuant moves an activation's outlier channel into the weight: the rewritten GEMM
// gets smooth_scales, a / s and b * s, and a smaller error than without it.
TEST(QuantizeGemms, SmoothQuantCutsTheErrorOfOutlierChannels) {
  auto run = [](const char* smooth) {
    Recipe recipe = parseRecipe(fmt::format(R"(gemms:
  - {{label: up, decision: int8, lhs_format: "int8:channel:rtn", rhs_format: "int7:channel:rtn"{}}}
)",
                                            smooth),
                                "r.yaml");
    auto original = parseGraph(kMlp);
    auto quantized = rewritten(kMlp, recipe);
    RefTensor xr = randomRefTensor({DType::kF32, Shape{64, 32}}, 1);
    for (int r = 0; r < 64; ++r) xr.data[static_cast<size_t>(r * 32 + 5)] *= 60.0;  // one outlier channel
    Tensor x = toTensor(xr);
    Tensor w = toTensor(randomRefTensor({DType::kF32, Shape{32, 48}}, 2));
    Tensor w2 = toTensor(randomRefTensor({DType::kF32, Shape{48, 32}}, 3));
    Executor a(*original), b(*quantized);
    for (Executor* e : {&a, &b}) {
      e->bind("x", x);
      e->bind("w", w);
      e->bind("w2", w2);
      e->run();
    }
    return std::make_pair(testing::relativeSquaredError(a.output<float>(0), b.output<float>(0)),
                          printGraph(*quantized));
  };
  auto [plain, plain_text] = run("");
  auto [smoothed, text] = run(", smooth: 0.5");
  EXPECT_NE(text.find("%h.smooth = smooth_scales(%x, %w) {lhs_contract=[1], rhs_contract=[0], alpha=0.5} : f32[32]"),
            std::string::npos) << text;
  EXPECT_NE(text.find("%h.lhs_smoothed = div(%x,"), std::string::npos) << text;
  EXPECT_NE(text.find("%h.rhs_q = quantize(%h.rhs_smoothed,"), std::string::npos) << text;
  EXPECT_EQ(plain_text.find("smooth"), std::string::npos);
  EXPECT_LT(smoothed, plain / 2) << "plain " << plain << " smoothed " << smoothed;
}

// FP8 and MX have no int8 kernels here: each operand becomes the values its format
// represents (fake_quant), read by an f32 matmul that records the formats.
TEST(QuantizeGemms, EmulatesFp8AndMxGemmsWithFakeQuantAndAnF32Matmul) {
  Recipe recipe = parseRecipe(R"(gemms:
  - {label: up, decision: mxfp8, lhs_format: mxfp8_e4m3, rhs_format: mxfp8_e4m3}
  - {label: down, decision: fp8, lhs_format: "e4m3:tensor:rtn", rhs_format: "e4m3:tensor:rtn"}
)",
                              "r.yaml");
  auto g = rewritten(kMlp, recipe);
  std::string text = printGraph(*g);
  EXPECT_NE(text.find(R"(%h.lhs_fq = fake_quant(%x, %h.lhs_scales) {format="e4m3:block32:rtn:scale=e8m0", side="lhs", contract_dims=[1], seed=0} : f32[64,32])"),
            std::string::npos) << text;
  EXPECT_NE(text.find(R"(%h.emulated = matmul(%h.lhs_fq, %h.rhs_fq) {lhs_contract=[1], rhs_contract=[0], label="up")"),
            std::string::npos) << text;
  EXPECT_NE(text.find(R"(lhs_format="e4m3:tensor:rtn")"), std::string::npos) << text;
  for (const Node* n : g->nodes()) EXPECT_NE(n->op(), Op::kQMatMul);
  EXPECT_EQ(printGraph(*parseGraph(text)), text);

  // The emulated GEMM is the f32 product of the fake-quantized operands, and its error
  // against f32 is what the operands' SQNRs predict.
  auto original = parseGraph(kMlp);
  Tensor x = toTensor(randomRefTensor({DType::kF32, Shape{64, 32}}, 1));
  Tensor w = toTensor(randomRefTensor({DType::kF32, Shape{32, 48}}, 2));
  Tensor w2 = toTensor(randomRefTensor({DType::kF32, Shape{48, 32}}, 3));
  Executor a(*original), b(*g);
  for (Executor* e : {&a, &b}) {
    e->bind("x", x);
    e->bind("w", w);
    e->bind("w2", w2);
    e->run(5);
  }
  double error = testing::relativeSquaredError(a.output<float>(0), b.output<float>(0));
  EXPECT_GT(error, 1e-6);  // something was quantized
  EXPECT_LT(error, 0.01);  // ~1/SQNR of e4m3 (~30 dB) per GEMM
  // An MX block that does not tile K (down's K is 48) is refused, naming the entry.
  Recipe odd = parseRecipe("gemms:\n  - {label: down, decision: mxfp8, lhs_format: mxfp8_e4m3, rhs_format: mxfp8_e4m3}\n",
                           "odd.yaml");
  try {
    rewritten(kMlp, odd);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("odd.yaml:2: field 'lhs_format': GEMM 'down': MX block 32 does not divide"),
              std::string::npos)
        << e.what();
  }
}

// A bf16 decision makes the GEMM the CPU runs in bf16 (AMX, AVX512-BF16): both operands
// converted, a bf16 matmul with f32 accumulation; stochastic rounding fake-quantizes
// first. It computes the f32 product of the bf16-rounded operands.
TEST(QuantizeGemms, Bf16DecisionsRunAsBf16Gemms) {
  Recipe recipe = parseRecipe(R"(gemms:
  - {label: up, decision: bf16, lhs_format: bf16, rhs_format: bf16}
  - {label: down, decision: bf16, lhs_format: "bf16:tensor:sr", rhs_format: "bf16:tensor:rtn"}
)",
                              "r.yaml");
  auto g = rewritten(kMlp, recipe);
  std::string text = printGraph(*g);
  EXPECT_NE(text.find(R"(%h.lhs_bf16 = convert(%x) : bf16[64,32])"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(%h.bf16 = matmul(%h.lhs_bf16, %h.rhs_bf16) {lhs_contract=[1], rhs_contract=[0], label="up")"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(lhs_format="bf16:tensor:rtn", rhs_format="bf16:tensor:rtn")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(%y.lhs_fq = fake_quant(%h.bf16, %y.lhs_scales) {format="bf16:tensor:sr", side="lhs", contract_dims=[1], seed=0} : f32[64,48])"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(%y.lhs_bf16 = convert(%y.lhs_fq) : bf16[64,48])"), std::string::npos) << text;
  for (const Node* n : g->nodes()) EXPECT_NE(n->op(), Op::kQMatMul);
  EXPECT_EQ(printGraph(*parseGraph(text)), text);

  // Against the f32 GEMMs of the operands rounded to bf16 (round to nearest: `up` alone).
  const char* up_only = R"(graph @up {
  %x = input() : f32[64,32]
  %w = parameter() : f32[32,48]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="up"} : f32[64,48]
  return %h
}
)";
  auto bf16 = rewritten(up_only, parseRecipe("gemms:\n  - {label: up, decision: bf16, lhs_format: bf16, rhs_format: bf16}\n",
                                             "up.yaml"));
  auto f32 = parseGraph(up_only);
  Tensor x = toTensor(randomRefTensor({DType::kF32, Shape{64, 32}}, 1));
  Tensor w = toTensor(randomRefTensor({DType::kF32, Shape{32, 48}}, 2));
  Tensor xr = x.clone(), wr = w.clone();
  for (Tensor* t : {&xr, &wr}) kernels::roundToBf16(t->data<float>(), t->data<float>(), t->numElements());
  Executor a(*f32), b(*bf16), c(*f32);
  a.bind("x", x), a.bind("w", w);
  b.bind("x", x), b.bind("w", w);
  c.bind("x", xr), c.bind("w", wr);
  for (Executor* e : {&a, &b, &c}) e->run();
  EXPECT_LT(testing::relativeSquaredError(c.output<float>(0), b.output<float>(0)), 1e-12);
  const double error = testing::relativeSquaredError(a.output<float>(0), b.output<float>(0));
  EXPECT_GT(error, 1e-8);  // rounded to bf16: ~1/SQNR of two bf16 operands
  EXPECT_LT(error, 1e-4);
}

// NVFP4 with 16x16 weight tiles and the random Hadamard transform on both operands runs
// emulated; its error against f32 is a 4-bit one. A transform on a K that is no multiple
// of 16, or on one operand only, is refused naming the entry.
TEST(QuantizeGemms, EmulatesNvfp4WithTheTransformAndRefusesWhatCannotRun) {
  Recipe nv = parseRecipe(R"(gemms:
  - {label: up, decision: nvfp4, lhs_format: "e2m1:block16:rtn:scale=e4m3:rht", rhs_format: "e2m1:block16x16:rtn:scale=e4m3:rht"}
  - {label: down, decision: nvfp4, lhs_format: nvfp4, rhs_format: "e2m1:block16x16:rtn:scale=e4m3"}
)",
                          "nv.yaml");
  auto g = rewritten(kMlp, nv);
  auto original = parseGraph(kMlp);
  Tensor x = toTensor(randomRefTensor({DType::kF32, Shape{64, 32}}, 1));
  Tensor w = toTensor(randomRefTensor({DType::kF32, Shape{32, 48}}, 2));
  Tensor w2 = toTensor(randomRefTensor({DType::kF32, Shape{48, 32}}, 3));
  Executor a(*original), b(*g);
  for (Executor* e : {&a, &b}) {
    e->bind("x", x);
    e->bind("w", w);
    e->bind("w2", w2);
    e->run(5);
  }
  const double error = testing::relativeSquaredError(a.output<float>(0), b.output<float>(0));
  EXPECT_GT(error, 1e-3);  // 4 bits: ~1/SQNR of NVFP4 (~100) per operand
  EXPECT_LT(error, 0.1);
  auto refused = [](const char* text, const char* expected) {
    try {
      rewritten(R"(graph @odd {
  %x = input() : f32[8,24]
  %w = parameter() : f32[24,16]
  %y = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="odd"} : f32[8,16]
  return %y
}
)",
                parseRecipe(text, "rht.yaml"));
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused("gemms:\n  - {label: odd, decision: fp8, lhs_format: \"e4m3:tensor:rtn:rht\", rhs_format: "
          "\"e4m3:tensor:rtn:rht\"}\n",
          "rht.yaml:2: field 'lhs_format': GEMM 'odd': the random Hadamard transform (rht) works on blocks of 16");
  refused("gemms:\n  - {label: odd, decision: nvfp4, lhs_format: nvfp4, rhs_format: nvfp4}\n",
          "rht.yaml:2: field 'lhs_format': GEMM 'odd': NVFP4 block 16 does not divide its contracting dimension K = 24");
}

TEST(QuantizeGemms, RefusesToMixInt8AndFp8Operands) {
  EXPECT_THROW(parseRecipe(R"(gemms:
  - {label: up, decision: fp8, lhs_format: "e4m3:tensor:rtn", rhs_format: "int8:channel:rtn"}
)",
                           "r.yaml"),
               Error);
  try {
    parseRecipe("gemms:\n  - {label: up, decision: int8, lhs_format: \"e4m3:tensor:rtn\", rhs_format: \"e4m3:tensor:rtn\"}\n",
                "r.yaml");
    FAIL() << "a decision that is not the formats' family must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("r.yaml:2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("family fp8"), std::string::npos) << e.what();
  }
}

// The activation scale `up` gets in each step of delayed scaling with history `history`,
// its input x [64, 32] filled by fill(step, x).
std::vector<float> delayedScales(int history, size_t steps, const std::function<void(size_t, float*)>& fill,
                                 std::string* graph_text = nullptr) {
  Recipe recipe = parseRecipe(fmt::format(R"(gemms:
  - {{label: up, decision: fp8, lhs_format: "e4m3:tensor:rtn", rhs_format: "e4m3:tensor:rtn", amax_history: {}}}
)",
                                          history),
                              "r.yaml");
  auto g = rewritten(kMlp, recipe);
  if (graph_text) *graph_text = printGraph(*g);
  g->addOutput(g->find("h.lhs_scales"));
  Executor e(*g);
  Tensor w = toTensor(randomRefTensor({DType::kF32, Shape{32, 48}}, 2));
  Tensor w2 = toTensor(randomRefTensor({DType::kF32, Shape{48, 32}}, 3));
  e.bind("w", w);
  e.bind("w2", w2);
  std::vector<float> scales;
  for (size_t step = 0; step < steps; ++step) {
    Tensor x(TensorType{DType::kF32, Shape{64, 32}});
    fill(step, x.data<float>());
    e.bind("x", x);
    e.run(0);
    scales.push_back(e.output<float>(1)[0]);
  }
  return scales;
}

// Delayed scaling: the scale of a step comes from the amax of the steps before it.
TEST(QuantizeGemms, DelayedScalingUsesTheAmaxHistory) {
  const std::vector<float> amax = {1.0f, 4.0f, 2.0f, 0.5f, 0.5f};
  std::string text;
  std::vector<float> scales = delayedScales(2, amax.size(), [&](size_t step, float* x) {
    std::fill(x, x + 64 * 32, 0.25f);
    x[7] = amax[step];
  }, &text);
  EXPECT_NE(text.find("amax_history=2, amax_compute=\"max\""), std::string::npos) << text;
  // Step 0 has no history (just in time); then max over the last two steps.
  const std::vector<float> amax_used = {1.0f, 1.0f, 4.0f, 4.0f, 2.0f};
  for (size_t i = 0; i < scales.size(); ++i) EXPECT_FLOAT_EQ(scales[i], amax_used[i] / 448.0f) << "step " << i;
}

// An all-zero step (a LoRA B at init, a gradient masked out) gives an amax of 0: as in
// TE, the scale stays the step before's (at first 1). It was the smallest scale, which
// flushed the next step's whole tensor to +-5e-36 (session 17's hunt).
TEST(QuantizeGemms, DelayedScalingKeepsTheScaleOverAnAllZeroHistory) {
  const std::vector<float> value = {0.0f, 3.0f, 0.0f, 2.0f};
  std::vector<float> scales =
      delayedScales(1, value.size(), [&](size_t step, float* x) { std::fill(x, x + 64 * 32, value[step]); });
  // Step 0: all zero, just in time: 1. Step 1: its history is step 0's 0: still 1.
  // Step 2: step 1's 3. Step 3: step 2's 0 keeps 3 / 448.
  const std::vector<float> expected = {1.0f, 1.0f, 3.0f / 448.0f, 3.0f / 448.0f};
  for (size_t i = 0; i < scales.size(); ++i) EXPECT_FLOAT_EQ(scales[i], expected[i]) << "step " << i;
}

// Predicted weight scales (MOSS): measured once, then the previous amax plus the
// optimizer's largest step, whatever the weight does in between.
TEST(QuantizeGemms, PredictedWeightScalesAddTheOptimizerStep) {
  Recipe recipe = parseRecipe(R"(gemms:
  - {label: up, decision: fp8, lhs_format: "e4m3:tensor:rtn", rhs_format: "e4m3:tensor:rtn", amax_history: 4,
     predict_weight_scale: true}
)",
                              "r.yaml");
  auto g = rewritten(kMlp, recipe);
  const std::string text = printGraph(*g);
  // The weight (rhs) predicts; the activation keeps delayed scaling.
  EXPECT_NE(text.find("%h.rhs_scales = quant_params(%w) {format=\"e4m3:tensor:rtn\", side=\"rhs\", contract_dims=[0], "
                      "predict_scale=1}"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("%h.lhs_scales = quant_params(%x) {format=\"e4m3:tensor:rtn\", side=\"lhs\", contract_dims=[1], "
                      "amax_history=4"),
            std::string::npos)
      << text;
  g->addOutput(g->find("h.rhs_scales"));
  Executor e(*g);
  Tensor x = toTensor(randomRefTensor({DType::kF32, Shape{64, 32}}, 1));
  Tensor w2 = toTensor(randomRefTensor({DType::kF32, Shape{48, 32}}, 3));
  Tensor w(TensorType{DType::kF32, Shape{32, 48}});
  e.bind("x", x);
  e.bind("w2", w2);
  e.bind("w", w);
  std::vector<float> scales;
  const float amax[] = {2.0f, 2.01f, 0.5f, 2.05f};
  const double step[] = {0.0, 0.02, 0.02, 0.02};
  for (int t = 0; t < 4; ++t) {
    std::fill(w.data<float>(), w.data<float>() + 32 * 48, 0.1f);
    w.data<float>()[5] = amax[t];
    e.run(t, step[t]);
    scales.push_back(e.output<float>(1)[0]);
  }
  // Measured at step 0 (2.0), then 2.02, 2.04, 2.06: never below the true amax.
  const double predicted[] = {2.0, 2.02, 2.04, 2.06};
  for (int t = 0; t < 4; ++t) EXPECT_FLOAT_EQ(scales[static_cast<size_t>(t)], float(predicted[t] / 448.0)) << t;
  // A per-block weight format cannot predict a per-tensor amax.
  Recipe bad = parseRecipe(R"(gemms:
  - {label: up, decision: fp8, lhs_format: "e4m3:tensor:rtn", rhs_format: "e4m3:channel:rtn", predict_weight_scale: true}
)",
                           "bad.yaml");
  EXPECT_THROW(rewritten(kMlp, bad), Error);
}

}  // namespace
}  // namespace pgq
