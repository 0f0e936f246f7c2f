#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "support/errors.h"
#include "support/option_ranges.h"

namespace pgq {
namespace {

template <typename T>
std::string errorOf(const OptionRange<T>& range, T value) {
  try {
    range.check(value);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(OptionRange, TextShowsOpenAndClosedBoundsAndBoundingOptions) {
  EXPECT_EQ(ranges::kLr.text(), "(0, 10]");
  EXPECT_EQ(ranges::kMinLrRatio.text(), "[0, 1]");
  EXPECT_EQ(ranges::kFraction.text(), "(0, 1)");
  EXPECT_EQ(ranges::kWarmup.text(), "[0, --steps]");
  EXPECT_EQ(ranges::kSteps.text(), "[1, 1000000000000]");
  EXPECT_EQ(ranges::kProbeSeconds.text(), "[0.05, 60]");
}

TEST(OptionRange, RejectsEveryNonFiniteValue) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (const OptionRange<double>& r : {ranges::kLr, ranges::kGradClip, ranges::kMinLrRatio, ranges::kLossBudget}) {
    EXPECT_FALSE(r.contains(nan)) << r.name;
    EXPECT_FALSE(r.contains(inf)) << r.name;
    EXPECT_FALSE(r.contains(-inf)) << r.name;
  }
  EXPECT_EQ(errorOf(ranges::kLr, nan), "--lr: expected a finite number in (0, 10], got nan");
  EXPECT_EQ(errorOf(ranges::kGradClip, -inf), "--grad-clip: expected a finite number in [0, 1000000], got -inf");
}

TEST(OptionRange, BoundsAreOpenOrClosedAsShown) {
  EXPECT_FALSE(ranges::kLr.contains(0));
  EXPECT_TRUE(ranges::kLr.contains(1e-9));
  EXPECT_TRUE(ranges::kLr.contains(10));
  EXPECT_FALSE(ranges::kLr.contains(10.000001));
  EXPECT_FALSE(ranges::kFraction.contains(1));
  EXPECT_TRUE(ranges::kMinLrRatio.contains(1));
  EXPECT_TRUE(ranges::kStopAfter.contains(0));
  EXPECT_FALSE(ranges::kSteps.contains(0));
  EXPECT_FALSE(ranges::kSteps.contains(std::numeric_limits<int64_t>::max()));
  EXPECT_EQ(errorOf(ranges::kSteps, int64_t{-1}), "--steps: expected an integer in [1, 1000000000000], got -1");
}

TEST(OptionRange, ABoundingOptionIsNamedWithItsValue) {
  EXPECT_NO_THROW(ranges::kWarmup.check(30, 30));
  try {
    ranges::kWarmup.check(100, 30);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--warmup: expected an integer in [0, --steps] (--steps is 30), got 100");
  }
}

TEST(OptionRange, ThreadsAreBoundedByThisMachinesProcessors) {
  OptionRange<int64_t> threads = ranges::threadsRange();
  EXPECT_TRUE(threads.contains(0));
  EXPECT_TRUE(threads.contains(1));
  EXPECT_GE(threads.max, 1);
  EXPECT_FALSE(threads.contains(threads.max + 1));
  EXPECT_FALSE(threads.contains(-1));
}

// Sums of two step counts, the largest the training loop forms, stay in int64.
TEST(OptionRange, StepCountsCannotOverflowWhenAdded) {
  int64_t sum = 0;
  EXPECT_FALSE(__builtin_add_overflow(ranges::kMaxSteps, ranges::kMaxSteps, &sum));
  EXPECT_FALSE(__builtin_mul_overflow(ranges::kMaxSteps, 2 * ranges::kMaxExtraRecipes + 10, &sum));
}

}  // namespace
}  // namespace pgq
