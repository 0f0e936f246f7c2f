#include <gtest/gtest.h>

#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/instrument_stats.h"
#include "passes/pipeline.h"
#include "passes/tag_metadata.h"
#include "support/errors.h"

namespace pgq {
namespace {

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
  InstrumentStats pass({.formats = {"int8:channel:rtn"}, .gradient_formats = {"int8:channel:sr"}});
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
  bad.add(std::make_unique<InstrumentStats>(InstrumentStatsOptions{.formats = {"int9:channel:rtn"}}));
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

}  // namespace
}  // namespace pgq
