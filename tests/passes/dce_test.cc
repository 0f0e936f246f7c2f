#include <gtest/gtest.h>

#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/dce.h"

namespace pgq {
namespace {

TEST(Dce, RemovesNodesNoOutputNeeds) {
  auto g = parseGraph(R"(graph @g {
  %x = input() : f32[4]
  %w = parameter() : f32[4]
  %a = exp(%x) : f32[4]
  %dead = log(%a) : f32[4]
  %dead2 = neg(%dead) : f32[4]
  return %a
}
)");
  PassContext ctx;
  EXPECT_TRUE(DeadCodeElimination().run(*g, ctx));
  EXPECT_EQ(printGraph(*g), R"(graph @g {
  %x = input() : f32[4]
  %w = parameter() : f32[4]
  %a = exp(%x) : f32[4]
  return %a
}
)");
}

TEST(Dce, NoChangeWhenEverythingIsLive) {
  const char* text = R"(graph @g {
  %x = input() : f32[4]
  %a = exp(%x) : f32[4]
  %b = log(%a) : f32[4]
  return %a, %b
}
)";
  auto g = parseGraph(text);
  PassContext ctx;
  EXPECT_FALSE(DeadCodeElimination().run(*g, ctx));
  EXPECT_EQ(printGraph(*g), text);
}

}  // namespace
}  // namespace pgq
