#include "kernels/rope.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernel_error.h"
#include "tests/kernels/f32_test_util.h"

namespace pgq::kernels {
namespace {

using testing::Guarded;
using testing::kThreadCounts;
using testing::maxRelError;
using testing::randomVector;
using testing::ThreadCount;

struct RopeShape {
  int64_t rows, seq, dim;
};

// Head dims around the vector width (half = 1, 4, 8, 9, 32), rows x seq x dim above the
// parallel threshold (16K elements), and positions far enough for large angles.
const RopeShape kShapes[] = {{1, 1, 2}, {3, 5, 8}, {2, 7, 16}, {4, 3, 18}, {2, 512, 64}, {8, 40, 64}};

// The definition, in f64: dims i and i + dim/2 of row t turn by t * theta^(-2i/dim).
std::vector<double> ropeRef(const std::vector<float>& x, RopeShape s, double theta, double sign) {
  std::vector<double> y(x.size());
  const int64_t half = s.dim / 2;
  for (int64_t r = 0; r < s.rows * s.seq; ++r) {
    const double t = static_cast<double>(r % s.seq);
    for (int64_t i = 0; i < half; ++i) {
      const double a = sign * t * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(s.dim));
      const double lo = x[static_cast<size_t>(r * s.dim + i)], hi = x[static_cast<size_t>(r * s.dim + half + i)];
      y[static_cast<size_t>(r * s.dim + i)] = lo * std::cos(a) - hi * std::sin(a);
      y[static_cast<size_t>(r * s.dim + half + i)] = hi * std::cos(a) + lo * std::sin(a);
    }
  }
  return y;
}

TEST(RopeTest, MatchesF64ReferenceInBothDirections) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (RopeShape s : kShapes) {
      for (double theta : {10000.0, 500000.0, 2.0}) {
        const int64_t n = s.rows * s.seq * s.dim;
        const std::vector<float> x = randomVector(n, 31);
        const RopeTable table = ropeTable(s.seq, s.dim, theta);
        for (RopeRotation rotation : {RopeRotation::kForward, RopeRotation::kInverse}) {
          SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.seq << "x" << s.dim << " theta " << theta
                                            << (rotation == RopeRotation::kInverse ? " inverse" : " forward")
                                            << " threads " << threads);
          Guarded y(n);
          rope(x.data(), y.data(), s.rows, table, rotation);
          // cos and sin are rounded to f32 once (relative 6e-8 each), then two products
          // and a sum of O(1) values.
          const double sign = rotation == RopeRotation::kInverse ? -1.0 : 1.0;
          EXPECT_LE(maxRelError(y.data(), ropeRef(x, s, theta, sign), 1.0), 4e-7);
          EXPECT_TRUE(y.guardsIntact());
          // In place gives the same bits.
          std::vector<float> z = x;
          rope(z.data(), z.data(), s.rows, table, rotation);
          EXPECT_TRUE(testing::bitwiseEqual(z, y.values()));
        }
      }
    }
  }
}

TEST(RopeTest, InverseUndoesForwardAndResultsDoNotDependOnThreads) {
  const RopeShape s{4, 300, 32};
  const int64_t n = s.rows * s.seq * s.dim;
  const std::vector<float> x = randomVector(n, 32);
  const RopeTable table = ropeTable(s.seq, s.dim, 10000.0);
  std::vector<std::vector<float>> results;
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    std::vector<float> y(x.size()), back(x.size());
    rope(x.data(), y.data(), s.rows, table, RopeRotation::kForward);
    rope(y.data(), back.data(), s.rows, table, RopeRotation::kInverse);
    std::vector<double> expected(x.begin(), x.end());
    EXPECT_LE(maxRelError(back.data(), expected, 1.0), 5e-7);
    results.push_back(y);
  }
  EXPECT_TRUE(testing::bitwiseEqual(results[0], results[1]));
}

// Position 0 is the identity; at a far position every angle is the one computed in
// double (in f32, t * frequency at t = 60000 would already be off by up to 2e-4
// radians for the second pair, whose angle is 6000).
TEST(RopeTest, TableHoldsTheAnglesComputedInDouble) {
  const RopeTable table = ropeTable(60001, 8, 10000.0);
  EXPECT_EQ(table.half, 4);
  for (int64_t i = 0; i < table.half; ++i) {
    EXPECT_EQ(table.cos[static_cast<size_t>(i)], 1.0f);
    EXPECT_EQ(table.sin[static_cast<size_t>(i)], 0.0f);
    const double angle = 60000.0 * std::pow(10000.0, -2.0 * static_cast<double>(i) / 8.0);
    const size_t at = static_cast<size_t>(60000 * table.half + i);
    EXPECT_EQ(table.cos[at], static_cast<float>(std::cos(angle))) << i;
    EXPECT_EQ(table.sin[at], static_cast<float>(std::sin(angle))) << i;
  }
}

TEST(RopeTest, BadSizesAreKernelErrors) {
  EXPECT_THROW(ropeTable(4, 7, 10000.0), KernelError);   // odd dim
  EXPECT_THROW(ropeTable(-1, 8, 10000.0), KernelError);  // negative size
  EXPECT_THROW(ropeTable(4, 8, 0.0), KernelError);       // theta must be > 0
  EXPECT_THROW(ropeTable(4, 8, std::nan("")), KernelError);
  RopeTable table = ropeTable(4, 8, 10000.0);
  float v = 0.0f;
  EXPECT_THROW(rope(&v, &v, -1, table, RopeRotation::kForward), KernelError);
  table.sin.pop_back();  // a table that does not match its sizes
  EXPECT_THROW(rope(&v, &v, 1, table, RopeRotation::kForward), KernelError);
  // Nothing to do: no error, nothing written.
  EXPECT_NO_THROW(rope(nullptr, nullptr, 0, ropeTable(4, 8, 10000.0), RopeRotation::kForward));
}

}  // namespace
}  // namespace pgq::kernels
