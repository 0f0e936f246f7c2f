#include <cstring>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "ir/analysis.h"
#include "ir/parser.h"
#include "ir/quant.h"
#include "kernels/cpu_isa.h"
#include "ir/printer.h"
#include "passes/instrument_stats.h"
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

QuantFormat qf(const char* text) { return QuantFormat::parse(text); }

TEST(InstrumentStats, OneNodePerDistinctInputWithEveryUse) {
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[8,16]
  %wq = parameter() : f32[16,4]
  %wk = parameter() : f32[16,4]
  %q = matmul(%x, %wq) {lhs_contract=[1], rhs_contract=[0], label="q", direction="fwd", roles=["activation","weight"]} : f32[8,4]
  %k = matmul(%x, %wk) {lhs_contract=[1], rhs_contract=[0], label="k", direction="fwd", roles=["activation","weight"]} : f32[8,4]
  %g = matmul(%x, %q) {lhs_contract=[0], rhs_contract=[0], label="g", direction="bwd_wgrad", roles=["activation","gradient"]} : f32[16,4]
  return %k, %g
}
)");
  PassContext ctx;
  InstrumentStats pass({.formats = {qf("int8:channel:rtn")}, .gradient_formats = {qf("int8:channel:sr")}});
  EXPECT_TRUE(pass.run(*g, ctx));
  std::string text = printGraph(*g);
  EXPECT_NE(text.find(R"(%x.stats = quant_stats(%x) {formats=["int8:channel:rtn"], contract_dims=[1], uses=["q:lhs","k:lhs"], seed=0} : f32[1,9])"),
            std::string::npos) << text;
  // x contracted over its rows is a different view: a node of its own.
  EXPECT_NE(text.find(R"(%x.stats.1 = quant_stats(%x) {formats=["int8:channel:rtn"], contract_dims=[0], uses=["g:lhs"])"),
            std::string::npos) << text;
  // The gradient operand also gets the stochastic-rounding format.
  EXPECT_NE(text.find(R"(%q.stats = quant_stats(%q) {formats=["int8:channel:rtn","int8:channel:sr"], contract_dims=[0], uses=["g:rhs"])"),
            std::string::npos) << text;
  int stats = 0;
  for (const Node* n : g->outputs()) stats += n->op() == Op::kQuantStats;
  EXPECT_EQ(stats, 5);  // x (rows), wq, wk, x (cols), q
  EXPECT_EQ(g->outputs().size(), 7u);
  EXPECT_FALSE(pass.run(*g, ctx));  // already instrumented: no change
}

TEST(InstrumentStats, NeedsTagsAndRejectsBadFormats) {
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[8,16]
  %w = parameter() : f32[16,4]
  %q = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0]} : f32[8,4]
  return %q
}
)");
  PassContext ctx;
  EXPECT_THROW(InstrumentStats().run(*g, ctx), Error);
  // From C++ a bad format fails when the graph is verified; from text, when parsed.
  Pipeline bad;
  bad.add(std::make_unique<TagMetadata>());
  QuantFormat int9 = perChannelFormat(8);
  int9.bits = 9;
  bad.add(std::make_unique<InstrumentStats>(InstrumentStatsOptions{.formats = {int9}}));
  EXPECT_THROW(bad.run(*g, ctx), Error);
  EXPECT_THROW(parsePipeline("tag_metadata,instrument_stats{formats=[int9:channel:rtn]}"), Error);
}

TEST(InstrumentStats, CoversEveryGemmOfTheTrainingGraph) {
  TransformerGraph t = buildTransformer(loadModelConfig("tiny"));
  appendBackward(*t.graph, t.loss, t.params);
  PassContext ctx;
  parsePipeline("tag_metadata,instrument_stats")->run(*t.graph, ctx);
  std::set<std::string> uses;
  for (const Node* n : t.graph->outputs())
    if (n->op() == Op::kQuantStats) {
      for (const std::string& u : n->attrs().getStrings(AttrKey::kUses)) EXPECT_TRUE(uses.insert(u).second) << u;
    }
  int gemms = 0;
  for (const Node* n : t.graph->nodes())
    if (n->op() == Op::kMatMul) {
      ++gemms;
      EXPECT_TRUE(uses.count(n->attrs().getString(AttrKey::kLabel) + ":lhs"));
      EXPECT_TRUE(uses.count(n->attrs().getString(AttrKey::kLabel) + ":rhs"));
    }
  EXPECT_EQ(static_cast<int>(uses.size()), 2 * gemms);
}

// With the results profiled, the embedding gradient's scatter-add gets statistics too
// (for the gradient reach), with the last seed: the GEMMs' noise streams, the copies'
// included, are those of a graph without it.
TEST(InstrumentStats, ResultsIncludeTheEmbeddingGradientWithTheLastSeed) {
  auto count = [](const Graph& g) {
    std::map<Op, int> n;
    for (const Node* out : g.outputs())
      if (out->op() == Op::kQuantStats) ++n[out->operand(0)->op()];
    return n;
  };
  auto instrument = [](bool outputs) {
    TransformerGraph t = buildTransformer(loadModelConfig("tiny"));
    appendBackward(*t.graph, t.loss, t.params);
    PassContext ctx;
    TagMetadata().run(*t.graph, ctx);
    InstrumentStats({.outputs = outputs, .output_pairs = {{qf("int8:channel:rtn"), qf("int8:channel:sr")}}}).run(*t.graph, ctx);
    return t;
  };
  TransformerGraph plain = instrument(false), with = instrument(true);
  EXPECT_EQ(count(*plain.graph)[Op::kScatterAdd], 0);
  ASSERT_EQ(count(*with.graph)[Op::kScatterAdd], 1);
  int64_t last = -1, scatter = -1;
  for (const Node* n : with.graph->nodes()) {
    if (!n->attrs().has(AttrKey::kSeed)) continue;
    last = std::max(last, n->attrs().getInt(AttrKey::kSeed));
    if (n->op() == Op::kQuantStats && n->operand(0)->op() == Op::kScatterAdd) {
      scatter = n->attrs().getInt(AttrKey::kSeed);
      EXPECT_EQ(n->attrs().getStrings(AttrKey::kUses)[0], "scatter:" + n->operand(0)->name() + ":out");
    }
  }
  EXPECT_EQ(scatter, last);
}

std::map<Op, int> opCounts(const Graph& g) {
  std::map<Op, int> counts;
  for (const Node* n : g.nodes()) ++counts[n->op()];
  return counts;
}

// A forward GEMM and a weight-gradient GEMM: x [8,16] x w [16,4] -> y, and
// x^T [16,8] x dy [8,4] -> dw, dy a gradient.
constexpr const char* kForwardAndWgrad = R"(graph @g {
  %x = input() : f32[8,16]
  %w = parameter() : f32[16,4]
  %dy = input() : f32[8,4]
  %y = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="fc", direction="fwd", roles=["activation","weight"]} : f32[8,4]
  %dw = matmul(%x, %dy) {lhs_contract=[0], rhs_contract=[0], label="fc:wgrad", direction="bwd_wgrad", roles=["activation","gradient"]} : f32[16,4]
  return %y, %dw
}
)";

TEST(InstrumentStats, OutputPairsBuildAQuantizedCopyOfEachGemmPerDistinctPair) {
  auto g = parseGraph(kForwardAndWgrad);
  PassContext ctx;
  TagMetadata().run(*g, ctx);
  InstrumentStats pass({.formats = {qf("int8:channel:rtn")},
                        .gradient_formats = {qf("int8:channel:sr")},
                        .bias = true,
                        .output_pairs = {{qf("int7:channel:rtn"), qf("int7:channel:rtn")},
                                         {qf("int7:channel:rtn"), qf("int7:channel:sr")},
                                         {qf("e4m3:tensor:rtn"), qf("e5m2:tensor:sr")}},
                        .seed = 10});
  EXPECT_TRUE(pass.run(*g, ctx));
  std::string text = printGraph(*g);
  // fc has no gradient operand: the first two pairs give it the same formats, one copy.
  // fc:wgrad gets three: its gradient (rhs) in int7 rtn and sr, and e5m2.
  std::map<Op, int> counts = opCounts(*g);
  EXPECT_EQ(counts[Op::kErrorStats], 5);
  EXPECT_EQ(counts[Op::kQMatMul], 3);
  EXPECT_EQ(counts[Op::kMatMul], 2 + 2);  // the model's two, and the two emulated copies
  EXPECT_EQ(counts[Op::kQuantize], 6);
  EXPECT_EQ(counts[Op::kFakeQuant], 4);
  EXPECT_EQ(counts[Op::kQuantParams], 10);
  EXPECT_EQ(counts[Op::kQuantStats], 4);  // x (rows), w, x (columns), dy
  EXPECT_EQ(g->outputs().size(), 2u + 4u + 5u);
  // The copy reads what quantize_gemms would quantize, and carries only dims and formats.
  EXPECT_NE(text.find(R"(%y.q0.int8 = qmatmul(%y.q0.lhs_q, %y.q0.rhs_q, %y.q0.lhs_scales, %y.q0.rhs_scales) {lhs_contract=[1], rhs_contract=[0], lhs_format="int7:channel:rtn", rhs_format="int7:channel:rtn"} : f32[8,4])"),
            std::string::npos) << text;
  EXPECT_NE(text.find(R"(%y.error = error_stats(%y, %y.q0.int8) {label="fc", lhs_format="int7:channel:rtn", rhs_format="int7:channel:rtn"} : f32[3])"),
            std::string::npos) << text;
  EXPECT_NE(text.find(R"(%dw.error.1 = error_stats(%dw, %dw.q1.int8) {label="fc:wgrad", lhs_format="int7:channel:rtn", rhs_format="int7:channel:sr"})"),
            std::string::npos) << text;
  EXPECT_NE(text.find(R"(%dw.q2.emulated = matmul(%dw.q2.lhs_fq, %dw.q2.rhs_fq) {lhs_contract=[0], rhs_contract=[0], lhs_format="e4m3:tensor:rtn", rhs_format="e5m2:tensor:sr"})"),
            std::string::npos) << text;
  // Statistics nodes with the bias-aware SQNR; the copies' seeds continue theirs.
  EXPECT_NE(text.find(R"(%x.stats = quant_stats(%x) {formats=["int8:channel:rtn"], contract_dims=[1], uses=["fc:lhs"], bias=1, seed=10})"),
            std::string::npos) << text;
  // Round-to-nearest copies draw no noise (seed 0, so equal ones merge); the stochastic
  // ones keep the streams they take when every copy counts one: 14 to 23.
  std::set<int64_t> seeds;
  int rtn = 0;
  for (const Node* n : g->nodes())
    if (n->attrs().has(AttrKey::kSeed)) {
      const int64_t seed = n->attrs().getInt(AttrKey::kSeed);
      if (n->op() != Op::kQuantStats && n->attrs().getFormat(AttrKey::kFormat).rounding == Rounding::kNearest) {
        EXPECT_EQ(seed, 0) << n->name();
        ++rtn;
        continue;
      }
      EXPECT_TRUE(seeds.insert(seed).second) << n->name();
    }
  EXPECT_EQ(seeds.size() + static_cast<size_t>(rtn), 4u + 10u);
  EXPECT_GT(rtn, 0);
  EXPECT_EQ(*seeds.begin(), 10);
  EXPECT_LE(*seeds.rbegin(), 23);
  // No copy looks like a GEMM of the model: only the model's GEMMs carry tags.
  for (const Node* n : g->nodes()) {
    if (n->op() != Op::kMatMul && n->op() != Op::kQMatMul) continue;
    const bool model = n->name() == "y" || n->name() == "dw";
    for (AttrKey tag : {AttrKey::kLabel, AttrKey::kRoles, AttrKey::kDirection, AttrKey::kGemmId})
      EXPECT_EQ(n->attrs().has(tag), model && tag != AttrKey::kGemmId) << n->name() << " " << attrName(tag);
    EXPECT_EQ(isMeasuredOnly(*g, *n), !model) << n->name();
  }
  // tag_metadata run again tags nothing (it passes the copies by).
  EXPECT_FALSE(TagMetadata().run(*g, ctx));
  EXPECT_FALSE(pass.run(*g, ctx));  // already instrumented
}

TEST(InstrumentStats, NoOutputPairsNoCopies) {
  auto g = parseGraph(kForwardAndWgrad);
  PassContext ctx;
  EXPECT_TRUE(InstrumentStats().run(*g, ctx));
  std::map<Op, int> counts = opCounts(*g);
  EXPECT_EQ(counts[Op::kErrorStats], 0);
  EXPECT_EQ(counts[Op::kQMatMul] + counts[Op::kQuantize] + counts[Op::kQuantParams] + counts[Op::kFakeQuant], 0);
  EXPECT_EQ(printGraph(*g).find("bias="), std::string::npos);
  // A pair of an int8 and an FP8 format cannot run as one GEMM.
  auto h = parseGraph(kForwardAndWgrad);
  EXPECT_THROW(InstrumentStats({.output_pairs = {{qf("int8:channel:rtn"), qf("e5m2:tensor:sr")}}}).run(*h, ctx), Error);
  // From text.
  auto t = parseGraph(kForwardAndWgrad);
  parsePipeline("instrument_stats{output_pairs=[int8:channel:rtn/int8:channel:sr]}")->run(*t, ctx);
  EXPECT_EQ(opCounts(*t)[Op::kErrorStats], 2);
  EXPECT_THROW(parsePipeline("instrument_stats{output_pairs=[int8:channel:rtn]}"), Error);
  EXPECT_THROW(parsePipeline("instrument_stats{output_pairs=[int9:channel:rtn/int8:channel:sr]}"), Error);
}

// Numerics: the instrumented graph computes what the plain one does, and each
// error_stats reports the SQNR of the result quantize_gemms computes with those formats
// (round to nearest: the same values, whatever the seeds).
TEST(InstrumentStats, ErrorStatsReportTheErrorOfTheGemmQuantizeGemmsRuns) {
  // The GEMM twice on the same operands: `ref` stays f32, `q` is rewritten.
  const char* twice = R"(graph @g {
  %x = input() : f32[64,32]
  %w = parameter() : f32[32,48]
  %ref = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="ref"} : f32[64,48]
  %q = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="q"} : f32[64,48]
  return %ref, %q
}
)";
  Tensor x = toTensor(randomRefTensor({DType::kF32, Shape{64, 32}}, 1));
  Tensor w = toTensor(randomRefTensor({DType::kF32, Shape{32, 48}}, 2));
  Tensor w2 = toTensor(randomRefTensor({DType::kF32, Shape{48, 32}}, 3));
  // bf16: its copy is a bf16 matmul (which once lacked the GEMM's dims).
  // Both sides in one integer format: 8 bits where the CPU runs 8 x 8 exactly (VNNI), 7 elsewhere.
  const char* integer = kernels::int8Caps().vnni ? "int8:channel:rtn" : "int7:channel:rtn";
  for (const char* format : {integer, "int5:block16:rtn", "e4m3:tensor:rtn", "bf16:tensor:rtn"}) {
    SCOPED_TRACE(format);
    auto plain = parseGraph(testing::kMlp);
    auto measured = parseGraph(testing::kMlp);
    PassContext ctx;
    TagMetadata().run(*measured, ctx);
    InstrumentStats({.output_pairs = {{qf(format), qf(format)}}}).run(*measured, ctx);
    auto rewritten = parseGraph(twice);
    const QuantFormat parsed = QuantFormat::parse(format);
    const char* decision = parsed.element == Element::kBf16 ? "bf16" : parsed.isEmulated() ? "fp8" : "int8";
    Recipe recipe = parseRecipe(fmt::format("gemms:\n  - {{label: q, decision: {}, lhs_format: \"{}\", rhs_format: "
                                            "\"{}\"}}\n",
                                            decision, format, format),
                                "r.yaml");
    Pipeline p;
    p.add(std::make_unique<TagMetadata>());
    p.add(std::make_unique<QuantizeGemms>(QuantizeGemmsOptions{.recipe = recipe}));
    p.run(*rewritten, ctx);
    Executor a(*plain), b(*measured), c(*rewritten);
    for (Executor* e : {&a, &b, &c}) {
      e->bind("x", x);
      e->bind("w", w);
      if (e != &c) e->bind("w2", w2);
      e->run();
    }
    // Training numerics do not change.
    ASSERT_EQ(a.output<float>(0).size(), b.output<float>(0).size());
    EXPECT_EQ(std::memcmp(a.output<float>(0).data(), b.output<float>(0).data(), a.output<float>(0).size_bytes()), 0);
    const double expected = 1 / testing::relativeSquaredError(c.output<float>(0), c.output<float>(1));
    int found = 0;
    for (size_t i = 0; i < measured->outputs().size(); ++i) {
      const Node* out = measured->outputs()[i];
      if (out->op() != Op::kErrorStats || out->attrs().getString(AttrKey::kLabel) != "up") continue;
      ++found;
      std::span<const float> stats = b.output<float>(i);
      EXPECT_NEAR(stats[static_cast<size_t>(ErrorStatField::kSqnr)], expected, 1e-6 * expected);
      EXPECT_NEAR(stats[static_cast<size_t>(ErrorStatField::kSqnr)],
                  stats[static_cast<size_t>(ErrorStatField::kMeanSquare)] / stats[static_cast<size_t>(ErrorStatField::kMse)],
                  1e-6 * expected);
    }
    EXPECT_EQ(found, 1);
  }
}

}  // namespace
}  // namespace pgq
