// User patterns over GEMM labels (recipe `match:`, policy `label:`) against hostile
// input: deep nesting, catastrophic backtracking, huge labels, overlong patterns.
#include "support/label_pattern.h"

#include <chrono>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "plan/policy.h"
#include "plan/recipe.h"
#include "support/errors.h"
#include "tests/test_util.h"

namespace pgq {
namespace {

using test::errorOf;

double secondsFor(const std::function<void()>& f) {
  auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(LabelPattern, MatchesTheWholeLabel) {
  LabelPattern mlp("layer[0-9]+/mlp/.*");
  EXPECT_TRUE(mlp.matches("layer0/mlp/up"));
  EXPECT_TRUE(mlp.matches("layer12/mlp/down:wgrad"));
  EXPECT_FALSE(mlp.matches("xlayer0/mlp/up"));
  EXPECT_FALSE(mlp.matches("layer0/mlp"));
  // Whole-label semantics also for alternations whose first branch matches a prefix.
  LabelPattern alternatives("get_logits|get_logits:dgrad");
  EXPECT_TRUE(alternatives.matches("get_logits:dgrad"));
  EXPECT_FALSE(alternatives.matches("get_logits:wgrad"));
  EXPECT_TRUE(LabelPattern().matches("anything"));
  EXPECT_TRUE(LabelPattern("").empty());
}

TEST(LabelPattern, BacktrackingPatternAnswersFast) {
  LabelPattern pattern("(.*)*(.*)*X");
  std::string label(1000000, 'a');
  bool matched = true;
  EXPECT_LT(secondsFor([&] { matched = pattern.matches(label); }), 0.5);
  EXPECT_FALSE(matched);
  label.back() = 'X';
  EXPECT_TRUE(pattern.matches(label));
}

TEST(LabelPattern, DeepNestingIsRefusedOrCompiled) {
  std::string deep = std::string(100000, '(') + "a" + std::string(100000, ')');
  std::string error;
  EXPECT_LT(secondsFor([&] { error = errorOf([&] { LabelPattern{deep}; }); }), 0.5);
  EXPECT_EQ(error, "the pattern has 200001 characters, more than the 1000 a pattern may have");
  // As deep as the length cap allows: compiled without recursion, and matched.
  std::string capped = std::string(499, '(') + "a" + std::string(499, ')');
  ASSERT_EQ(capped.size(), 999u);
  EXPECT_TRUE(LabelPattern(capped).matches("a"));
}

TEST(LabelPattern, InvalidPatternsGiveRe2sReason) {
  EXPECT_EQ(errorOf([] { LabelPattern("layer(0"); }), "not a valid regular expression: missing ): layer(0");
  // Within the length cap but past RE2's memory budget.
  EXPECT_TRUE(errorOf([] { LabelPattern("((a{1000}){1000}){1000}"); }).starts_with("not a valid regular expression: "));
}

TEST(LabelPattern, RecipesAndPoliciesNameTheFileLineAndField) {
  std::string overlong(1001, 'a');
  EXPECT_EQ(errorOf([&] { parseRecipe("gemms:\n  - {match: \"" + overlong + "\", decision: keep}\n", "r.yaml"); }),
            "r.yaml:2: field 'gemms[0].match': the pattern has 1001 characters, more than the 1000 a pattern may have");
  EXPECT_EQ(errorOf([] { parseRecipe("gemms:\n  - {match: \"(\", decision: keep}\n", "r.yaml"); }),
            "r.yaml:2: field 'gemms[0].match': not a valid regular expression: missing ): (");
  const std::string dirs = "forward: {quantize: true}\nbackward: {quantize: false}\n";
  EXPECT_EQ(errorOf([&] { parsePolicy(dirs + "rules:\n  - {label: \"" + overlong + "\", action: keep}\n", "p.yaml"); }),
            "p.yaml:4: field 'rules[0].label': the pattern has 1001 characters, more than the 1000 a pattern may have");
  // A backtracking pattern in a policy rule compiles, and describes itself as written.
  Policy p = parsePolicy(dirs + "rules:\n  - {label: \"(.*)*(.*)*X\", action: keep}\n", "p.yaml");
  EXPECT_EQ(p.rules[0].describe(), "label ~ (.*)*(.*)*X");
  EXPECT_FALSE(p.rules[0].label.matches(std::string(100000, 'a')));
}

}  // namespace
}  // namespace pgq
