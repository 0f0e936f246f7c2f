#include <gtest/gtest.h>

#include "ir/builder.h"
#include "ir/verifier.h"
#include "support/errors.h"

namespace pgq {
namespace {

TEST(Verifier, AcceptsWellFormedGraphs) {
  Graph g;
  Builder b(g);
  Node* x = b.input("x", {DType::kF32, Shape{4, 8}});
  g.addOutput(b.transpose(x, {1, 0}));
  EXPECT_NO_THROW(verify(g));
}

TEST(Verifier, CatchesAttributeEditsThatBreakTypes) {
  Graph g;
  Builder b(g);
  Node* x = b.input("x", {DType::kF32, Shape{4, 8}});
  Node* t = b.transpose(x, {1, 0}, "t");
  g.addOutput(t);
  t->attrs().set(AttrKey::kPerm, std::vector<int64_t>{0, 1});  // now disagrees with f32[8,4]
  try {
    verify(g);
    FAIL() << "verifier accepted a stale type";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("%t (transpose): type is f32[8,4] but its operands give f32[4,8]"),
              std::string::npos)
        << e.what();
  }
  t->attrs().set(AttrKey::kPerm, std::vector<int64_t>{2, 0});
  EXPECT_THROW(verify(g), Error);
  t->attrs().set(AttrKey::kPerm, std::vector<int64_t>{1, 0});
  t->attrs().set(AttrKey::kEps, 1.0);  // an attribute transpose does not take
  EXPECT_THROW(verify(g), Error);
}

TEST(Verifier, ValidNames) {
  EXPECT_TRUE(isValidName("layer0/attn/q.1"));
  EXPECT_FALSE(isValidName(""));
  EXPECT_FALSE(isValidName("a b"));
  EXPECT_FALSE(isValidName("a:b"));
}

}  // namespace
}  // namespace pgq
