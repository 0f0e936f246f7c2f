#include "kernels/convert.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "tests/kernels/f32_test_util.h"

namespace pgq::kernels {
namespace {

using testing::kAwkwardSizes;
using testing::kThreadCounts;
using testing::ThreadCount;

uint32_t bitsOf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

float fromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// Round to nearest, ties to even, by comparing distances to the two bf16 neighbours in
// f64 (independent of the kernel's integer bias trick). Finite inputs only.
uint16_t roundRef(float x) {
  const uint32_t bits = bitsOf(x);
  const uint16_t down = static_cast<uint16_t>(bits >> 16);  // toward zero
  const uint16_t up = static_cast<uint16_t>(down + 1);      // away from zero
  const double dd = std::abs(static_cast<double>(x) - fromBits(static_cast<uint32_t>(down) << 16));
  // The neighbour away from zero may be inf (0x7f80): treat it as 2^128.
  const double up_value = (up & 0x7fff) == 0x7f80 ? std::ldexp(1.0, 128) : std::abs(static_cast<double>(fromBits(static_cast<uint32_t>(up) << 16)));
  const double du = std::abs(up_value - std::abs(static_cast<double>(x)));
  if (dd < du) return down;
  if (du < dd) return up;
  return (down & 1) == 0 ? down : up;
}

float roundOne(float x) {
  float y;
  roundToBf16(&x, &y, 1);
  return y;
}

TEST(Bf16Test, TiesRoundToEven) {
  // 0x3f80'8000 is exactly halfway between 0x3f80 and 0x3f81: even 0x3f80 wins.
  EXPECT_EQ(bitsOf(roundOne(fromBits(0x3f808000))), 0x3f800000u);
  // Halfway between 0x3f81 and 0x3f82: even 0x3f82 wins.
  EXPECT_EQ(bitsOf(roundOne(fromBits(0x3f818000))), 0x3f820000u);
  EXPECT_EQ(bitsOf(roundOne(fromBits(0x3f808001))), 0x3f810000u);  // just above the tie
  EXPECT_EQ(bitsOf(roundOne(fromBits(0x3f807fff))), 0x3f800000u);  // just below
  EXPECT_EQ(bitsOf(roundOne(fromBits(0xbf818000))), 0xbf820000u);  // negative tie
  // A tie whose rounding carries into the exponent.
  EXPECT_EQ(bitsOf(roundOne(fromBits(0x3fff8000))), 0x40000000u);
}

TEST(Bf16Test, SpecialValuesAndDenormals) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(roundOne(inf), inf);
  EXPECT_EQ(roundOne(-inf), -inf);
  // NaNs stay NaN, including one whose payload is only in the dropped low half.
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    EXPECT_TRUE(std::isnan(roundOne(fromBits(nan_bits)))) << std::hex << nan_bits;
    uint16_t h;
    const float x = fromBits(nan_bits);
    f32ToBf16(&x, &h, 1);
    EXPECT_EQ(h & 0x7f80, 0x7f80);
    EXPECT_NE(h & 0x007f, 0) << std::hex << nan_bits;
  }
  // Above the largest bf16 (0x7f7f) halfway to 2^128: rounds to inf like torch.
  EXPECT_EQ(roundOne(std::numeric_limits<float>::max()), inf);
  EXPECT_EQ(bitsOf(roundOne(fromBits(0x7f7f7fff))), 0x7f7f0000u);
  // Denormals round on the same bit pattern.
  EXPECT_EQ(bitsOf(roundOne(fromBits(0x00008000))), 0x00000000u);  // tie, even
  EXPECT_EQ(bitsOf(roundOne(fromBits(0x00018000))), 0x00020000u);  // tie, odd -> up
  EXPECT_EQ(bitsOf(roundOne(fromBits(0x00000001))), 0x00000000u);
  EXPECT_EQ(bitsOf(roundOne(fromBits(0x007fffff))), 0x00800000u);  // up to the smallest normal
  EXPECT_EQ(bitsOf(roundOne(fromBits(0x80000001))), 0x80000000u);  // -0 keeps its sign
}

TEST(Bf16Test, MatchesNearestEvenReferenceOnManyPatterns) {
  // Every high half, with low halves at and around the tie and random ones.
  std::vector<float> x;
  std::mt19937 gen(71);
  for (uint32_t hi = 0; hi < 0x10000; ++hi) {
    if ((hi & 0x7f80) == 0x7f80) continue;  // inf/NaN are covered above
    for (uint32_t lo : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, static_cast<uint32_t>(gen() & 0xffffu)})
      x.push_back(fromBits(hi << 16 | lo));
  }
  const int64_t n = static_cast<int64_t>(x.size());
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    std::vector<float> y(x.size());
    std::vector<uint16_t> h(x.size());
    roundToBf16(x.data(), y.data(), n);
    f32ToBf16(x.data(), h.data(), n);
    int64_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t want = roundRef(x[i]);
      if (bitsOf(y[i]) != static_cast<uint32_t>(want) << 16 || h[i] != want) ++bad;
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(Bf16Test, RoundTripAndAwkwardSizes) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (int64_t n : kAwkwardSizes) {
      const std::vector<float> x = testing::randomVector(n, 72, -1e3f, 1e3f);
      testing::Guarded rounded(n);
      roundToBf16(x.data(), rounded.data(), n);
      // uint16 output with guards.
      std::vector<uint16_t> h(static_cast<size_t>(n) + 16, 0xbeef);
      f32ToBf16(x.data(), h.data(), n);
      for (size_t i = static_cast<size_t>(n); i < h.size(); ++i) ASSERT_EQ(h[i], 0xbeef);
      testing::Guarded back(n);
      bf16ToF32(h.data(), back.data(), n);
      EXPECT_TRUE(testing::bitwiseEqual(back.values(), rounded.values())) << n;
      EXPECT_TRUE(rounded.guardsIntact());
      EXPECT_TRUE(back.guardsIntact());
      // bf16 keeps 8 significant bits: relative rounding error at most 2^-8.
      for (int64_t i = 0; i < n; ++i)
        ASSERT_LE(std::abs(rounded[i] - x[static_cast<size_t>(i)]), std::abs(x[static_cast<size_t>(i)]) * 0x1p-8f);
    }
  }
}

TEST(Bf16Test, WideningIsExactForEveryPattern) {
  std::vector<uint16_t> all(0x10000);
  for (uint32_t i = 0; i < 0x10000; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> y(all.size());
  bf16ToF32(all.data(), y.data(), static_cast<int64_t>(all.size()));
  for (uint32_t i = 0; i < 0x10000; ++i) ASSERT_EQ(bitsOf(y[i]), i << 16) << i;
}

}  // namespace
}  // namespace pgq::kernels
