#include "kernels/reduce.h"

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernel_error.h"
#include "kernels/quant_stats.h"
#include "tests/kernels/f32_test_util.h"

namespace pgq::kernels {
namespace {

using testing::Guarded;
using testing::kThreadCounts;
using testing::randomVector;
using testing::ThreadCount;

struct Shape3 {
  int64_t outer, mid, inner;
};

// Row reduces (inner 1), column reduces (outer 1), general, empty mid, inner not a
// multiple of 8, several 256-row groups and 512-column chunks, and sizes above the
// parallel threshold.
const Shape3 kShapes[] = {{1, 1, 1},     {1, 0, 5},     {4, 0, 1},      {5, 7, 1},     {300, 100, 1},
                          {1, 2049, 1},  {1, 3, 9},     {1, 2048, 256}, {1, 70, 37},   {1, 1000, 33},
                          {2, 100, 300}, {3, 5, 40},    {6, 17, 7},     {8, 2, 2},     {3, 600, 20},
                          {1, 40, 1100}, {2, 257, 515}};

TEST(ReduceTest, MatchesF64Reference) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (const Shape3& s : kShapes) {
      const std::vector<float> x = randomVector(s.outer * s.mid * s.inner, 51, -1.0f, 1.0f);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMean}) {
        Guarded y(s.outer * s.inner);
        reduce(op, x.data(), y.data(), s.outer, s.mid, s.inner);
        for (int64_t o = 0; o < s.outer; ++o)
          for (int64_t i = 0; i < s.inner; ++i) {
            double sum = 0.0, abs_sum = 0.0;
            double max = -std::numeric_limits<double>::infinity();
            for (int64_t m = 0; m < s.mid; ++m) {
              const double v = x[static_cast<size_t>((o * s.mid + m) * s.inner + i)];
              sum += v;
              abs_sum += std::abs(v);
              max = std::max(max, v);
            }
            const float got = y[o * s.inner + i];
            const char* name = op == ReduceOp::kSum ? "sum" : op == ReduceOp::kMax ? "max" : "mean";
            if (op == ReduceOp::kMax) {
              ASSERT_EQ(got, max) << name << " " << s.outer << "x" << s.mid << "x" << s.inner;
            } else if (op == ReduceOp::kMean && s.mid == 0) {
              ASSERT_TRUE(std::isnan(got));
            } else {
              const double div = op == ReduceOp::kMean ? static_cast<double>(s.mid) : 1.0;
              // f32 blocks of 16 terms folded into f64: a few f32 roundings per term at
              // most, plus the final rounding to f32.
              ASSERT_NEAR(got, sum / div, (1e-7 * abs_sum + 6e-8 * std::abs(sum)) / div)
                  << name << " " << s.outer << "x" << s.mid << "x" << s.inner;
            }
          }
        EXPECT_TRUE(y.guardsIntact());
      }
    }
  }
}

// Long sums must not drift like a naive f32 accumulation: 2^20 copies of 0.1 sum to
// 104857.6 (a naive f32 loop gives ~100958).
TEST(ReduceTest, LongSumsStayAccurate) {
  const int64_t n = int64_t{1} << 20;
  const std::vector<float> x(static_cast<size_t>(n), 0.1f);
  float row = 0.0f;
  reduce(ReduceOp::kSum, x.data(), &row, 1, n, 1);
  EXPECT_NEAR(row, n * static_cast<double>(0.1f), 0.02);
  std::vector<float> cols(8);
  reduce(ReduceOp::kSum, x.data(), cols.data(), 1, n / 8, 8);
  for (float c : cols) EXPECT_NEAR(c, n / 8 * static_cast<double>(0.1f), 0.01);
}

TEST(ReduceTest, MaxPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = randomVector(4 * 50 * 40, 52);
  x[7 * 40 + 3] = nan;  // outer 0, mid 7, column 3
  std::vector<float> y(4 * 40);
  reduce(ReduceOp::kMax, x.data(), y.data(), 4, 50, 40);
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_FALSE(std::isnan(y[4]));
  std::vector<float> rows(4 * 50);
  reduce(ReduceOp::kMax, x.data(), rows.data(), 4 * 50, 40, 1);  // row 7 holds the NaN
  EXPECT_TRUE(std::isnan(rows[7]));
  EXPECT_FALSE(std::isnan(rows[8]));
  // Several row groups, the NaN in a later one.
  std::vector<float> tall = randomVector(1000 * 9, 54);
  tall[700 * 9 + 8] = nan;
  std::vector<float> tall_max(9);
  reduce(ReduceOp::kMax, tall.data(), tall_max.data(), 1, 1000, 9);
  EXPECT_TRUE(std::isnan(tall_max[8]));
  EXPECT_FALSE(std::isnan(tall_max[7]));
  // The NaN in the first lanes and larger values in later lanes.
  std::vector<float> r = {nan, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 5.0f};
  float m = 0.0f;
  reduce(ReduceOp::kMax, r.data(), &m, 1, 9, 1);
  EXPECT_TRUE(std::isnan(m));
}

TEST(ReduceTest, ResultsDoNotDependOnThreadCount) {
  for (auto [outer, mid, inner] : {Shape3{1, 2048, 256}, Shape3{2048, 256, 1}, Shape3{16, 128, 256}, Shape3{32, 2, 16384}}) {
    const std::vector<float> x = randomVector(outer * mid * inner, 53);
    std::vector<float> a(static_cast<size_t>(outer * inner)), b(a.size());
    {
      ThreadCount tc(1);
      reduce(ReduceOp::kSum, x.data(), a.data(), outer, mid, inner);
    }
    {
      ThreadCount tc(2);
      reduce(ReduceOp::kSum, x.data(), b.data(), outer, mid, inner);
    }
    EXPECT_TRUE(testing::bitwiseEqual(a, b)) << outer << "x" << mid << "x" << inner;
  }
}

// Up to 16 reduced rows (grouped-query attention's key/value gradients sum 2-8 query
// heads) the sum is the f32 sum of the rows in order, from +0, and the mean that sum in
// double over the count: exactly what the general path computes for one fold.
TEST(ReduceTest, ShortReducedAxesSumInF32InOrder) {
  for (auto [outer, mid, inner] : {Shape3{32, 2, 16384}, Shape3{3, 16, 1029}, Shape3{5, 1, 13}, Shape3{2, 7, 520}}) {
    std::vector<float> x = randomVector(outer * mid * inner, 54, -3.0f, 3.0f);
    x[0] = -0.0f;  // +0 + -0 is +0
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
      std::vector<float> y(static_cast<size_t>(outer * inner));
      reduce(op, x.data(), y.data(), outer, mid, inner);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          float sum = 0.0f;
          for (int64_t m = 0; m < mid; ++m) sum += x[static_cast<size_t>((o * mid + m) * inner + i)];
          const float want = op == ReduceOp::kSum ? sum
                                                  : static_cast<float>(static_cast<double>(sum) / static_cast<double>(mid));
          ASSERT_EQ(std::bit_cast<uint32_t>(y[static_cast<size_t>(o * inner + i)]), std::bit_cast<uint32_t>(want))
              << outer << "x" << mid << "x" << inner << " at " << o << "," << i;
        }
    }
  }
}

TEST(ReduceTest, NegativeSizesThrow) {
  float v = 0.0f;
  EXPECT_THROW(reduce(ReduceOp::kSum, &v, &v, 1, -1, 1), KernelError);
  EXPECT_THROW(errorStats(&v, &v, -1), KernelError);
}

// errorStats against sums in double over every size around the vector width, the
// parallel threshold and the 16K-element chunks, with both thread counts bitwise equal.
TEST(ErrorStatsTest, MatchesADoubleReferenceForAnyThreadCount) {
  for (int64_t n : std::vector<int64_t>{1, 3, 7, 8, 9, 17, 1023, 16384, 16385, 20011, 100003}) {
    SCOPED_TRACE(n);
    const std::vector<float> ref = randomVector(n, 61, -3.0f, 3.0f);
    std::vector<float> approx = ref;
    const std::vector<float> noise = randomVector(n, 62, -0.01f, 0.01f);
    for (size_t i = 0; i < approx.size(); ++i) approx[i] += noise[i];
    double signal = 0, error = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      signal += static_cast<double>(ref[i]) * ref[i];
      error += (static_cast<double>(approx[i]) - ref[i]) * (static_cast<double>(approx[i]) - ref[i]);
    }
    ErrorStats one, two;
    {
      ThreadCount tc(1);
      one = errorStats(ref.data(), approx.data(), n);
    }
    {
      ThreadCount tc(2);
      two = errorStats(ref.data(), approx.data(), n);
    }
    EXPECT_EQ(one.finite_count, n);
    EXPECT_NEAR(one.mean_square, signal / n, 1e-12 * signal / n);
    EXPECT_NEAR(one.mse, error / n, 1e-12 * error / n);
    EXPECT_NEAR(one.sqnr, signal / error, 1e-12 * signal / error);
    EXPECT_EQ(one.mean_square, two.mean_square);
    EXPECT_EQ(one.mse, two.mse);
    EXPECT_EQ(one.sqnr, two.sqnr);
  }
}

TEST(ErrorStatsTest, NonFinitePairsTakeNoPartAndNoErrorIsTheCap) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> ref = {1, 2, nan, 4, 5, 6, 7, 8, 9, 2};
  const std::vector<float> approx = {1, 2, 3, inf, 5, 6, 7, 8, 9, 3};
  const ErrorStats s = errorStats(ref.data(), approx.data(), 10);
  EXPECT_EQ(s.finite_count, 8);
  EXPECT_DOUBLE_EQ(s.mean_square, (1 + 4 + 25 + 36 + 49 + 64 + 81 + 4) / 8.0);
  EXPECT_DOUBLE_EQ(s.mse, 1 / 8.0);
  EXPECT_DOUBLE_EQ(s.sqnr, 264.0);
  // Equal tensors, an empty one, one with no finite pair: the cap, never 0/0.
  EXPECT_EQ(errorStats(ref.data(), ref.data(), 10).sqnr, kSqnrCap);
  EXPECT_EQ(errorStats(ref.data(), approx.data(), 0).sqnr, kSqnrCap);
  const float nans[2] = {nan, nan};
  const ErrorStats none = errorStats(nans, nans, 2);
  EXPECT_EQ(none.finite_count, 0);
  EXPECT_EQ(none.mean_square, 0);
  EXPECT_EQ(none.sqnr, kSqnrCap);
}

}  // namespace
}  // namespace pgq::kernels
