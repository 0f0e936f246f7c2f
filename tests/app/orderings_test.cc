// The pure parts of `pgq experiment --orderings` (app/orderings.h): orderings from
// scores and seeds, and the area that summarises a curve.
#include "app/orderings.h"

#include <algorithm>

#include <gtest/gtest.h>

namespace pgq {
namespace {

TEST(Orderings, ByScoreHighestFirstTiesByLabel) {
  std::map<std::string, double> scores{{"d", 1}, {"a", 3}, {"c", 3}, {"b", 0.5}};
  EXPECT_EQ(orderByScore(scores), (std::vector<std::string>{"a", "c", "d", "b"}));
}

TEST(Orderings, RandomOrdersArePermutationsFixedByTheSeed) {
  std::vector<std::string> labels;
  for (int i = 0; i < 40; ++i) labels.push_back("g" + std::to_string(i));
  std::vector<std::string> one = randomOrder(labels, 7), again = randomOrder(labels, 7), other = randomOrder(labels, 8);
  EXPECT_EQ(one, again);
  EXPECT_NE(one, other);
  // The input order does not matter, only the set and the seed.
  std::vector<std::string> reversed(labels.rbegin(), labels.rend());
  EXPECT_EQ(randomOrder(reversed, 7), one);
  std::sort(one.begin(), one.end());
  std::vector<std::string> sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(one, sorted);
}

TEST(Orderings, SpearmanOfTwoOrders) {
  std::vector<std::string> a{"a", "b", "c", "d"}, reversed{"d", "c", "b", "a"};
  EXPECT_DOUBLE_EQ(spearman(a, a), 1.0);
  EXPECT_DOUBLE_EQ(spearman(a, reversed), -1.0);
  EXPECT_DOUBLE_EQ(spearman(a, {"b", "a", "c", "d"}), 1.0 - 6.0 * 2 / (4 * 15));
}

CurvePoint at(double speed, double delta) {
  CurvePoint p;
  p.est_speedup = speed;
  p.delta_pct = delta;
  return p;
}

TEST(Orderings, AreaIsTheMeanLossIncreaseOverTheSpeedRange) {
  // A straight line from (1, 0) to (2, 10): mean 5.
  EXPECT_DOUBLE_EQ(curveArea({at(1, 0), at(2, 10)}), 5.0);
  // Flat at 0 until 1.5, then up to 10: a quarter of the range's worth of 10.
  EXPECT_DOUBLE_EQ(curveArea({at(1, 0), at(1.5, 0), at(2, 10)}), 2.5);
  // Costly first (the adversarial shape): 10 at 1.5, 10 at 2.
  EXPECT_DOUBLE_EQ(curveArea({at(1, 0), at(1.5, 10), at(2, 10)}), 7.5);
}

}  // namespace
}  // namespace pgq
