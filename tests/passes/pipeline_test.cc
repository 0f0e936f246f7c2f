#include <gtest/gtest.h>

#include "ir/builder.h"
#include "passes/pipeline.h"
#include "passes/registry.h"
#include "support/errors.h"

namespace pgq {
namespace {

// A pass that edits the graph but claims it did not.
class LyingPass : public Pass {
 public:
  std::string_view name() const override { return "liar"; }
  bool run(Graph& graph, PassContext&) override {
    graph.removeDead();
    return false;
  }
};

// A pass that leaves an invalid graph behind.
class BreakingPass : public Pass {
 public:
  std::string_view name() const override { return "breaker"; }
  bool run(Graph& graph, PassContext&) override {
    for (Node* n : graph.nodes())
      if (n->op() == Op::kTranspose) n->attrs().set(AttrKey::kPerm, std::vector<int64_t>{0, 1});
    return true;
  }
};

Graph& smallGraph(Graph& g) {
  Builder b(g);
  Node* x = b.input("x", {DType::kF32, Shape{4, 8}});
  b.unary(Op::kExp, x, "dead");
  g.addOutput(b.transpose(x, {1, 0}, "t"));
  return g;
}

TEST(Pipeline, ParsesNamesAndRejectsUnknownOnes) {
  EXPECT_EQ(parsePipeline("cse,dce")->size(), 2u);
  EXPECT_EQ(parsePipeline("dce")->size(), 1u);
  try {
    parsePipeline("cse,foo");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown pass 'foo' (known passes: dce, cse"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parsePipeline(""), Error);
  EXPECT_THROW(parsePipeline("cse,,dce"), Error);
  EXPECT_THROW(parsePipeline("cse,"), Error);
}

TEST(Pipeline, ReportsChangeAndVerifies) {
  Graph g;
  smallGraph(g);
  PassContext ctx;
  EXPECT_TRUE(parsePipeline("cse,dce")->run(g, ctx));
  EXPECT_FALSE(parsePipeline("cse,dce")->run(g, ctx));
}

TEST(Pipeline, CatchesAPassThatLiesAboutChanges) {
  Graph g;
  smallGraph(g);
  Pipeline p;
  p.add(std::make_unique<LyingPass>());
  PassContext ctx;
  EXPECT_THROW(p.run(g, ctx), InternalError);
}

TEST(Pipeline, VerifiesAfterAChangingPass) {
  Graph g;
  smallGraph(g);
  Pipeline p;
  p.add(std::make_unique<BreakingPass>());
  PassContext ctx;
  EXPECT_THROW(p.run(g, ctx), Error);
}

}  // namespace
}  // namespace pgq
