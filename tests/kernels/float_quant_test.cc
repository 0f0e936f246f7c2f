#include "kernels/float_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "kernels/convert.h"
#include "kernels/float_quant_core.h"
#include "kernels/kernel_error.h"
#include "kernels/quant_stats.h"
#include "kernels/sr_noise.h"
#include "quant_test_util.h"

namespace pgq::kernels {
namespace {

using qtest::normalData;
using qtest::ThreadCount;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- The reference: every representable value, from the OCP FP8 specification ----

// The value of one 8-bit code, decoded as the OCP 8-bit Floating Point Specification
// (OFP8) rev. 1.0 defines it, independently of support/ and kernels/:
//   E4M3: bias 7, no infinities, S.1111.111 is NaN (so 1.110 * 2^8 = 448 is the largest)
//   E5M2: bias 15, exponent 11111 is +-Inf (mantissa 0) or NaN (IEEE 754 style)
// exponent field 0: subnormal, mantissa * 2^(1 - bias - m).
double decodeFp8(int code, Element element) {
  const int ebits = element == Element::kE4M3 ? 4 : 5;
  const int mbits = 7 - ebits;
  const int bias = element == Element::kE4M3 ? 7 : 15;
  const double sign = (code & 0x80) != 0 ? -1.0 : 1.0;
  const int exponent = (code >> mbits) & ((1 << ebits) - 1);
  const int mantissa = code & ((1 << mbits) - 1);
  if (element == Element::kE4M3 && exponent == 15 && mantissa == 7) return std::nan("");
  if (element == Element::kE5M2 && exponent == 31) {
    return mantissa == 0 ? sign * double(kInf) : std::nan("");
  }
  if (exponent == 0) return sign * std::ldexp(double(mantissa), 1 - bias - mbits);
  return sign * std::ldexp(double((1 << mbits) + mantissa), exponent - bias - mbits);
}

// A non-negative finite element value and a code of it; neighbours have codes of
// different parity, and a tie goes to the even one (the even mantissa).
struct GridPoint {
  double value;
  int code;
};

// A bf16 code (sign, 8 exponent bits of bias 127, 7 mantissa bits), decoded as IEEE 754
// defines binary formats: exponent field 0 is subnormal, 255 Inf or NaN.
double decodeBf16(int code) {
  const double sign = (code & 0x8000) != 0 ? -1.0 : 1.0;
  const int exponent = (code >> 7) & 0xFF;
  const int mantissa = code & 0x7F;
  if (exponent == 255) return mantissa == 0 ? sign * double(kInf) : std::nan("");
  if (exponent == 0) return sign * std::ldexp(double(mantissa), -126 - 7);
  return sign * std::ldexp(double(128 + mantissa), exponent - 127 - 7);
}

// The non-negative finite values of a format's element, ascending: the decoded codes
// 0x00 .. 0x7F of an FP8 element, 0x0000 .. 0x7F7F of bf16, or the integers 0 .. qmax
// of an int element.
std::vector<GridPoint> positiveGrid(const QuantFormat& format) {
  std::vector<GridPoint> grid;
  if (!format.isFloat()) {
    for (int k = 0; k <= (1 << (format.bits - 1)) - 1; ++k) grid.push_back({double(k), k});
    return grid;
  }
  if (format.element == Element::kBf16) {
    for (int code = 0; code < 0x7F80; ++code) grid.push_back({decodeBf16(code), code});
    return grid;
  }
  for (int code = 0; code < 0x80; ++code) {
    const double v = decodeFp8(code, format.element);
    if (std::isfinite(v)) grid.push_back({v, code});
  }
  std::sort(grid.begin(), grid.end(),
            [](const GridPoint& a, const GridPoint& b) { return a.value < b.value; });
  return grid;
}

// The element nearest v by search: ties to the even code, saturation to +-max beyond
// max (+-Inf too; without `saturate`, as bf16, Inf from the midpoint of max and the next
// power of the exponent on), NaN stays NaN, the sign of zero kept.
float nearestElement(float v, const std::vector<GridPoint>& grid, bool saturate = true) {
  if (std::isnan(v)) return v;
  const double a = std::fabs(double(v));
  double r = grid.back().value;
  const double top_step = grid.back().value - grid[grid.size() - 2].value;
  if (!saturate && a >= r + 0.5 * top_step) return std::copysign(kInf, v);  // the max's code is odd
  if (a < r) {
    auto hi = std::upper_bound(grid.begin(), grid.end(), a,
                               [](double value, const GridPoint& p) { return value < p.value; });
    auto lo = hi - 1;
    const double mid = 0.5 * (lo->value + hi->value);  // exact: one bit more than either
    r = a < mid ? lo->value : a > mid ? hi->value : (lo->code % 2 == 0 ? lo->value : hi->value);
  }
  return std::copysign(float(r), v);
}

// The grid values below and above magnitude a <= max (equal when a is on the grid).
std::pair<double, double> neighbours(double a, const std::vector<GridPoint>& grid) {
  auto hi = std::lower_bound(grid.begin(), grid.end(), a,
                             [](const GridPoint& p, double value) { return p.value < value; });
  if (hi->value == a) return {a, a};
  return {(hi - 1)->value, hi->value};
}

// Values that probe every part of the grid: each value and its float neighbours, each
// midpoint (a tie) and its neighbours, both signs, beyond max, +-Inf, NaN, signed zeros
// and float subnormals; then `random` values with exponents across the element's range.
std::vector<float> probeValues(const std::vector<GridPoint>& grid, int64_t random, uint32_t seed) {
  std::vector<float> v;
  auto add = [&](float x) {
    for (float s : {x, -x}) {
      v.push_back(s);
      v.push_back(std::nextafter(s, kInf));
      v.push_back(std::nextafter(s, -kInf));
    }
  };
  for (size_t i = 0; i < grid.size(); ++i) {
    add(float(grid[i].value));
    if (i + 1 < grid.size()) {
      add(float(0.5 * (grid[i].value + grid[i + 1].value)));
      add(float(0.25 * grid[i].value + 0.75 * grid[i + 1].value));
    }
  }
  const float max = float(grid.back().value);
  const float top_step = float(grid.back().value - grid[grid.size() - 2].value);
  for (float x : {max + 0.5f * top_step, max + top_step, max * 1.5f, 1e10f, FLT_MAX, kInf,
                  std::numeric_limits<float>::denorm_min(), FLT_MIN, 1e-30f}) {
    add(x);
  }
  v.push_back(kNan);
  v.push_back(-kNan);
  std::mt19937 gen(seed);
  const int top = std::ilogb(max);
  std::uniform_int_distribution<int> exponent(std::ilogb(grid[1].value) - 12, top + 3);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
  for (int64_t i = 0; i < random; ++i) {
    const float m = 1.0f + float(mantissa(gen)) * 0x1p-23f;
    v.push_back(std::ldexp(i % 2 != 0 ? -m : m, exponent(gen)));
  }
  return v;
}

bool sameFloat(float a, float b) {
  return std::isnan(a) ? std::isnan(b) : std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// fakeQuantize of `values` as one row with every group's scale `scale`.
std::vector<float> fakeWithScale(const std::vector<float>& values, const QuantFormat& format,
                                 float scale, SrStream sr = {}) {
  const OperandView view{1, 1, int64_t(values.size()), true};
  std::vector<float> params(quantGroupCount(view, format), scale);
  std::vector<float> out(values.size());
  fakeQuantize(values, view, format, params, out, sr);
  return out;
}

// Where saturation starts to change the rounding: max plus half the step below it.
double clipEdge(const QuantFormat& format) {
  const std::vector<GridPoint> grid = positiveGrid(format);
  return grid.back().value + 0.5 * (grid.back().value - grid[grid.size() - 2].value);
}

float rounded(float v) {
  asm("" : "+x"(v));  // keep a product rounded to float (no contraction into an fma)
  return v;
}

// ---- Element rounding against the enumeration ----

TEST(FloatQuant, DecodedTablesHaveTheSpecsLimits) {
  const std::vector<GridPoint> e4m3 = positiveGrid(QuantFormat::parse("e4m3:tensor:rtn"));
  const std::vector<GridPoint> e5m2 = positiveGrid(QuantFormat::parse("e5m2:tensor:rtn"));
  // E4M3: 0, 7 subnormals, 15 exponents x 8 mantissas less the NaN pattern.
  EXPECT_EQ(e4m3.size(), 1u + 7u + 119u);
  EXPECT_EQ(e4m3.back().value, 448.0);
  EXPECT_EQ(e4m3[1].value, std::ldexp(1.0, -9));
  EXPECT_EQ(e4m3[8].value, std::ldexp(1.0, -6));  // the smallest normal
  // E5M2: 0, 3 subnormals, 30 exponents x 4 mantissas.
  EXPECT_EQ(e5m2.size(), 1u + 3u + 120u);
  EXPECT_EQ(e5m2.back().value, 57344.0);
  EXPECT_EQ(e5m2[1].value, std::ldexp(1.0, -16));
  EXPECT_TRUE(std::isinf(decodeFp8(0x7C, Element::kE5M2)));
  EXPECT_TRUE(std::isnan(decodeFp8(0x7F, Element::kE4M3)));
  EXPECT_TRUE(std::isnan(decodeFp8(0xFF, Element::kE4M3)));
  // Codes ascend with their values, so neighbours have codes of different parity.
  for (const auto* grid : {&e4m3, &e5m2}) {
    for (size_t i = 0; i < grid->size(); ++i) EXPECT_EQ((*grid)[i].code, int(i));
  }
  // The kernels' element limits agree with the decoded tables.
  for (const char* text : {"e4m3:tensor:rtn", "e5m2:tensor:rtn"}) {
    const QuantFormat format = QuantFormat::parse(text);
    const std::vector<GridPoint> grid = positiveGrid(format);
    const ElementLimits limits = elementLimits(format);
    EXPECT_EQ(limits.max, grid.back().value) << text;
    EXPECT_EQ(std::ldexp(1.0, limits.emin - limits.mantissa), grid[1].value) << text;
  }
}

// roundToElement and fakeQuantize (scale 1) give the nearest element of the enumeration,
// for every probe of probeValues: every value, every tie, the floats next to both, the
// subnormal range, saturation, +-Inf, NaN, and 10^6 random values.
TEST(FloatQuant, RoundToNearestMatchesTheEnumeration) {
  for (const char* text : {"e4m3:tensor:rtn", "e5m2:tensor:rtn", "int8:block32:rtn:scale=e8m0",
                           "int4:block32:rtn:scale=e8m0", "bf16:tensor:rtn"}) {
    const QuantFormat format = QuantFormat::parse(text);
    const std::vector<GridPoint> grid = positiveGrid(format);
    const std::vector<float> values = probeValues(grid, 1000000, 3);
    const std::vector<float> kernel = fakeWithScale(values, format, 1.0f);
    const bool saturate = format.element != Element::kBf16;
    int64_t bad = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const float expected = nearestElement(values[i], grid, saturate);
      const float scalar = roundToElement(values[i], format);
      if (!sameFloat(scalar, expected) || !sameFloat(kernel[i], expected)) {
        if (++bad <= 5) {
          ADD_FAILURE() << text << ": " << values[i] << " -> roundToElement " << scalar
                        << ", fakeQuantize " << kernel[i] << ", nearest " << expected;
        }
      }
    }
    EXPECT_EQ(bad, 0) << text;
  }
}

// With a scale s the kernel gives s * Q(x * inv), inv = 1/s, each product rounded to
// float, Q the enumeration's nearest element: for probes scaled by s, powers of two
// (exact) and others, including scales whose products leave the float range.
TEST(FloatQuant, ScaledValuesMatchTheEnumeration) {
  for (const char* text : {"e4m3:tensor:rtn", "e5m2:tensor:rtn", "int8:block32:rtn:scale=e8m0"}) {
    const QuantFormat format = QuantFormat::parse(text);
    const std::vector<GridPoint> grid = positiveGrid(format);
    std::vector<float> scales = {0x1p-5f, 0x1p-126f, 0x1p100f};
    if (format.scale == ScaleKind::kF32) scales.insert(scales.end(), {0.37f, 3e-30f, 1.7e20f});
    for (float s : scales) {
      std::vector<float> values = probeValues(grid, 100000, 5);
      for (float& v : values) v = rounded(v * s);
      const std::vector<float> kernel = fakeWithScale(values, format, s);
      const float inv = 1.0f / s;
      int64_t bad = 0;
      for (size_t i = 0; i < values.size(); ++i) {
        const float expected = rounded(s * nearestElement(rounded(values[i] * inv), grid));
        if (!sameFloat(kernel[i], expected) && ++bad <= 5) {
          ADD_FAILURE() << text << " scale " << s << ": " << values[i] << " -> " << kernel[i]
                        << ", expected " << expected;
        }
      }
      EXPECT_EQ(bad, 0) << text << " scale " << s;
    }
  }
}

// The bf16 format gives exactly what the bf16 GEMM path reads (convert.h's rounding):
// every upper half with low halves around the ties, NaN, Inf and subnormals included.
TEST(FloatQuant, Bf16IsTheBf16Conversion) {
  std::vector<float> x;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu, (hi * 40503u) & 0xFFFFu})
      x.push_back(std::bit_cast<float>(hi << 16 | lo));
  std::vector<float> converted(x.size());
  roundToBf16(x.data(), converted.data(), int64_t(x.size()));
  const std::vector<float> kernel = fakeWithScale(x, QuantFormat::parse("bf16"), 1.0f);
  int64_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (!sameFloat(kernel[i], converted[i]) && ++bad <= 5)
      ADD_FAILURE() << std::hexfloat << x[i] << ": fakeQuantize " << kernel[i] << ", roundToBf16 " << converted[i];
  EXPECT_EQ(bad, 0);
}

// ---- Stochastic rounding ----

// Over all 2^16 noise values, stochastic rounding of v (magnitude a) gives the grid value
// of magnitude lo <= a or hi >= a, hi exactly F times where F = trunc(frac * 2^16) and
// frac = (a - lo) / (hi - lo): the mean magnitude is lo + (hi - lo) F / 2^16, within 2^-16
// of a step below a. A zero result is +0.
TEST(FloatQuant, StochasticRoundingHasTheExactMeanOverAllNoise) {
  for (const char* text : {"e4m3:tensor:sr", "e5m2:tensor:sr", "int8:block32:sr:scale=e8m0", "bf16:tensor:sr"}) {
    const QuantFormat format = QuantFormat::parse(text);
    const std::vector<GridPoint> grid = positiveGrid(format);
    std::vector<float> values = probeValues(grid, 200, 8);
    values.erase(values.begin(), values.end() - 200);  // the random ones
    for (float v : {0.3f, -1.1f, 300.0f, 0.0031f, 1e-7f, -2.5e-5f, 440.0f, 1e6f, 126.6f, 3e-39f}) {
      values.push_back(v);
    }
    for (float v : values) {
      // bf16 does not saturate: beyond its max it rounds to Inf (tested by the enumeration).
      if (format.element == Element::kBf16 && !(std::fabs(v) <= grid.back().value)) continue;
      const float a = std::min(std::fabs(v), float(grid.back().value));
      const auto [lo, hi] = neighbours(a, grid);
      int64_t ups = 0;
      for (uint32_t r = 0; r < 65536; ++r) {
        const float q = roundToElement(v, format, r);
        ASSERT_TRUE(std::fabs(q) == lo || std::fabs(q) == hi) << text << " " << v << " -> " << q;
        ASSERT_TRUE(q == 0.0f ? !std::signbit(q) : std::signbit(q) == std::signbit(v)) << v;
        ups += std::fabs(q) == hi && hi != lo;
      }
      const double frac = hi == lo ? 0.0 : (double(a) - lo) / (hi - lo);
      EXPECT_EQ(ups, int64_t(std::trunc(frac * 65536.0))) << text << " " << v;
      const double mean = lo + (hi - lo) * double(ups) / 65536.0;
      EXPECT_LE(double(a) - mean, (hi - lo) * 0x1p-16) << text << " " << v;
      EXPECT_GE(double(a) - mean, 0.0) << text << " " << v;
    }
  }
}

// The kernel draws each element's noise from the stream of quantize(): srNoiseBits16(seed,
// offset, flat index). Its results are always a neighbour and average to the value.
TEST(FloatQuant, StochasticRoundingIsUnbiasedAndUsesTheElementNoise) {
  const int64_t n = 1 << 18;
  for (const char* text : {"e4m3:tensor:sr", "e5m2:tensor:sr", "int8:block32:sr:scale=e8m0", "bf16:tensor:sr"}) {
    const QuantFormat format = QuantFormat::parse(text);
    const std::vector<GridPoint> grid = positiveGrid(format);
    for (float v : {1.1f, -0.3f, 300.0f, 0.0031f, -5e-6f, 57000.0f, 126.6f, 1.00390625f}) {
      const std::vector<float> x(n, v);
      const SrStream sr{2024, 7};
      const std::vector<float> out = fakeWithScale(x, format, 1.0f, sr);
      const float a = std::min(std::fabs(v), float(grid.back().value));
      const auto [lo, hi] = neighbours(a, grid);
      double sum = 0.0;
      int64_t bad = 0;
      for (int64_t i = 0; i < 4096; ++i) {  // the scalar noise reference is slow
        bad += !sameFloat(out[i], roundToElement(v, format, srNoiseBits16(sr.seed, sr.offset, i)));
      }
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::fabs(out[i]) == lo || std::fabs(out[i]) == hi) << text << " " << v;
        sum += std::fabs(out[i]);
      }
      EXPECT_EQ(bad, 0) << text << " " << v;
      const double p = hi == lo ? 0.0 : (double(a) - lo) / (hi - lo);
      const double sigma = (hi - lo) * std::sqrt(p * (1.0 - p) / double(n));
      EXPECT_NEAR(sum / double(n), double(a), 5.0 * sigma + (hi - lo) * 0x1p-16)
          << text << " " << v;
    }
  }
}

TEST(FloatQuant, StochasticRoundingDependsOnSeedAndOffsetOnly) {
  const int64_t n = 4096;
  const QuantFormat format = QuantFormat::parse("e4m3:tensor:sr");
  const std::vector<float> x(n, 1.0625f);  // halfway between 1 and 1.125
  auto run = [&](SrStream sr) { return fakeWithScale(x, format, 1.0f, sr); };
  auto differing = [&](const std::vector<float>& a, const std::vector<float>& b) {
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) count += a[i] != b[i];
    return count;
  };
  const std::vector<float> base = run({1, 0});
  EXPECT_EQ(base, run({1, 0}));
  // Independent draws at a midpoint differ with probability 1/2: 2048 +- 32 expected.
  EXPECT_GT(differing(base, run({1, 1})), 1700);
  EXPECT_GT(differing(base, run({2, 0})), 1700);
  EXPECT_GT(differing(base, run({1, uint64_t(1) << 32})), 1700);
}

// Every implementation of the noise (VAES in registers, AES-NI and portable through the
// buffer) gives the same values, for runs with ragged heads and tails, per-element scales
// and runs of consecutive blocks (RunParams::row_len).
TEST(FloatQuant, StochasticRoundingIsTheSameForEveryNoiseImplementation) {
  const int64_t len = 1024;
  const std::vector<float> x = normalData(len, 23, 3.0f);
  std::vector<float> inv(len), scale(len);
  for (int64_t i = 0; i < len; ++i) {
    scale[i] = std::ldexp(1.0f, int(i % 5) - 6);
    inv[i] = 1.0f / scale[i];
  }
  struct Collect {
    std::vector<float>* out;
    int64_t first;
    void operator()(int64_t index, const detail::Lanes& l, int valid) {
      alignas(32) float t[32];
      for (int k = 0; k < 4; ++k) _mm256_store_ps(t + 8 * k, _mm256_mul_ps(l.t[k], l.scale[k]));
      for (int j = 0; j < valid; ++j) (*out)[size_t(index - first + j)] = t[j];
    }
  };
  for (const char* text : {"e4m3:tensor:sr", "int8:block32:sr:scale=e8m0", "bf16:tensor:sr"}) {
    const QuantFormat format = QuantFormat::parse(text);
    const detail::EmulatedGrid grid = detail::emulatedGridOf(format);
    const detail::GridLanes lanes(grid);
    // Element indices 13 .. 1012 (a head of 19, 30 full blocks, a tail of 21), one scale;
    // the same with a scale per element; and 16 blocks of 64 from index 64, a scale each.
    struct Case {
      int64_t index, len;
      detail::RunParams params;
      bool per_element;
    };
    detail::RunParams blocks{inv.data(), nullptr, scale.data()};
    blocks.row_len = 64;
    const std::vector<Case> cases = {
        {13, 1000, detail::RunParams{inv.data() + 7, nullptr, scale.data() + 7}, false},
        {13, 1000, detail::RunParams{inv.data(), nullptr, scale.data()}, true},
        {64, 1024, blocks, false},
    };
    for (size_t c = 0; c < cases.size(); ++c) {
      std::vector<float> expected;
      for (SrNoiseIsa isa : {SrNoiseIsa::kPortable, SrNoiseIsa::kAesNi, SrNoiseIsa::kVaes}) {
        if (!srNoiseIsaSupported(isa)) continue;
        detail::SrState state({8, 9}, isa);
        std::vector<float> got(cases[c].len, -1.0f);
        Collect sink{&got, cases[c].index};
        detail::emulatedRunAny(true, grid.kind, cases[c].per_element, x.data(),
                               cases[c].index, cases[c].len, cases[c].params, lanes, &state, sink);
        if (expected.empty()) {
          // The portable generator against the scalar definition.
          for (int64_t i = 0; i < cases[c].len; ++i) {
            const int64_t group = cases[c].params.row_len > 0 ? i / cases[c].params.row_len
                                  : cases[c].per_element      ? i
                                                              : 0;
            const float s = cases[c].params.scale[group];
            const float v = rounded(x[i] * cases[c].params.inv[group]);
            const uint32_t r = srNoiseBits16(8, 9, uint64_t(cases[c].index + i));
            ASSERT_TRUE(sameFloat(got[i], rounded(s * roundToElement(v, format, r))))
                << text << " case " << c << " element " << i;
          }
          expected = got;
        } else {
          EXPECT_EQ(got, expected) << text << " case " << c << " " << srNoiseIsaName(isa);
        }
      }
    }
  }
}

// ---- Scales ----

TEST(FloatQuant, E8m0ScalesArePowersOfTwoFromTheAbsmaxExponent) {
  const QuantFormat e4m3 = QuantFormat::parse("mxfp8_e4m3");
  const QuantFormat e5m2 = QuantFormat::parse("mxfp8_e5m2");
  const QuantFormat mxint8 = QuantFormat::parse("mxint8");
  auto scale = [](double absmax, const QuantFormat& format) {
    return emulatedScaleFromAbsmax(absmax, absmax, format);
  };
  EXPECT_EQ(scale(1.0, e4m3), 0x1p-8f);
  EXPECT_EQ(scale(std::nextafter(2.0f, 0.0f), e4m3), 0x1p-8f);  // just below 2: exponent 0
  EXPECT_EQ(scale(2.0, e4m3), 0x1p-7f);
  EXPECT_EQ(scale(448.0, e4m3), 1.0f);
  EXPECT_EQ(scale(500.0, e4m3), 1.0f);  // 500 saturates to 448, as OCP's conversion does
  EXPECT_EQ(scale(0x1p-100, e4m3), 0x1p-108f);
  EXPECT_EQ(scale(0x1p-119, e4m3), 0x1p-126f);
  EXPECT_EQ(scale(0x1p-130, e4m3), 0x1p-126f);  // a float subnormal: clamped
  EXPECT_EQ(scale(0.0, e4m3), 0x1p-126f);
  EXPECT_EQ(scale(std::nan(""), e4m3), 0x1p-126f);
  EXPECT_EQ(scale(FLT_MAX, e4m3), 0x1p119f);
  EXPECT_EQ(scale(double(kInf), e4m3), 0x1p119f);  // absmax clamped to FLT_MAX
  EXPECT_EQ(scale(1.0, e5m2), 0x1p-15f);
  EXPECT_EQ(scale(1.0, mxint8), 0x1p-6f);
  EXPECT_EQ(scale(std::nextafter(2.0f, 0.0f), mxint8), 0x1p-6f);  // 1.99.. -> 127.99 -> 127
  EXPECT_EQ(scale(0x1p127, mxint8), 0x1p121f);

  // computeEmulatedScales: one block per absmax above (NaN and Inf ignored), as params.
  const std::vector<float> absmax = {1.0f, std::nextafter(2.0f, 0.0f), 448.0f, 0x1p-130f, 0.0f};
  const OperandView view{1, int64_t(absmax.size()), 64, true};
  std::vector<float> x = normalData(view.elements(), 4, 1e-3f);
  for (size_t r = 0; r < absmax.size(); ++r) {
    for (int c = 0; c < 64; ++c) {
      float& v = x[r * 64 + c];
      v = std::clamp(v * absmax[r], -absmax[r], absmax[r]);
    }
    x[r * 64 + 40] = -absmax[r];
    x[r * 64 + 3] = kNan;
    x[r * 64 + 50] = -kInf;
  }
  std::vector<float> params(quantGroupCount(view, e4m3));
  ASSERT_EQ(params.size(), absmax.size() * 2);
  computeEmulatedScales(x, view, e4m3, params);
  for (size_t r = 0; r < absmax.size(); ++r) {
    EXPECT_EQ(params[2 * r + 1], scale(absmax[r], e4m3)) << r;  // the block holding -absmax
  }
}

TEST(FloatQuant, PerTensorScaleMapsTheAbsmaxToTheLargestElement) {
  const OperandView view{1, 40, 50, true};
  for (const char* text : {"e4m3:tensor:rtn", "e5m2:tensor:rtn"}) {
    const QuantFormat format = QuantFormat::parse(text);
    std::vector<float> x = normalData(view.elements(), 6);
    x[777] = -9.25f;  // the absmax, negative
    x[10] = kInf;     // ignored
    std::vector<float> params(1), out(x.size());
    computeEmulatedScales(x, view, format, params);
    const double max = elementLimits(format).max;
    EXPECT_EQ(params[0], float(9.25 / max)) << text;
    const float inv = 1.0f / params[0];
    EXPECT_EQ(roundToElement(rounded(x[777] * inv), format), -float(max)) << text;
    fakeQuantize(x, view, format, params, out);
    EXPECT_EQ(out[777], rounded(params[0] * -float(max))) << text;
    EXPECT_EQ(out[10], rounded(params[0] * float(max))) << text;  // Inf saturates
    // computeQuantParams dispatches to the same scales.
    std::vector<float> via_params(1);
    computeQuantParams(x, view, format, via_params);
    EXPECT_EQ(via_params, params) << text;
  }
}

// MOSS: each block's scale is the global scale times a power of two at least the block's
// absmax over the tensor's, so no block is clipped, small blocks keep their resolution,
// and delayed scaling (emulatedScaleFromAbsmax) reproduces the computed scales.
TEST(FloatQuant, TwoLevelScalesNeverClip) {
  const OperandView view{2, 48, 256, true};
  std::vector<float> x = normalData(view.elements(), 7);
  std::mt19937 gen(9);
  std::uniform_real_distribution<float> exponent(-20.0f, 12.0f);
  for (int64_t block = 0; block < view.elements() / 32; ++block) {
    const float factor = block % 5 == 0 ? std::exp2(exponent(gen)) : 1.0f;  // outlier blocks
    for (int64_t i = 0; i < 32; ++i) x[block * 32 + i] *= factor;
  }
  for (const char* text : {"e4m3:block32:rtn:scale=two_level", "e5m2:block32:sr:scale=two_level",
                           "e4m3:block20:rtn:scale=two_level"}) {
    const QuantFormat format = QuantFormat::parse(text);
    std::vector<float> params(quantGroupCount(view, format));
    computeEmulatedScales(x, view, format, params);
    const double max = elementLimits(format).max;
    double tensor = 0.0;
    std::vector<double> group(params.size(), 0.0);
    for (int64_t b = 0; b < view.batch; ++b)
      for (int64_t r = 0; r < view.rows; ++r)
        for (int64_t c = 0; c < view.cols; ++c) {
          const double a = std::fabs(x[(b * view.rows + r) * view.cols + c]);
          double& g = group[qtest::groupOf(view, format, b, r, c)];
          g = std::max(g, a);
          tensor = std::max(tensor, a);
        }
    const float global = float(tensor / max);
    for (size_t g = 0; g < params.size(); ++g) {
      int exponent_of_ratio = 0;
      ASSERT_EQ(std::frexp(params[g] / global, &exponent_of_ratio), 0.5f) << text << " " << g;
      ASSERT_LE(group[g] / params[g], max * (1.0 + 1e-6)) << text << " " << g;
      ASSERT_GT(group[g] / params[g], max / 2.0 * (1.0 - 1e-6)) << text << " " << g;
      ASSERT_EQ(params[g], emulatedScaleFromAbsmax(group[g], tensor, format)) << text << " " << g;
    }
    EXPECT_EQ(quantStats(x, view, format, {3, 3}).clipped_fraction, 0.0) << text;
  }
  // A zero block gets the global scale.
  std::vector<float> zeros(64, 0.0f);
  zeros[40] = 3.0f;
  std::vector<float> params(2);
  computeEmulatedScales(zeros, OperandView{1, 1, 64, true},
                        QuantFormat::parse("e4m3:block32:rtn:scale=two_level"), params);
  EXPECT_EQ(params[0], float(3.0 / 448.0));
  EXPECT_EQ(params[1], float(3.0 / 448.0));
}

// ---- Layouts: both orientations, batches, ragged blocks ----

// Group absmax over the finite values, by the group layout of quant_format.h.
std::vector<double> groupAbsmax(const std::vector<float>& x, const OperandView& view,
                                const QuantFormat& format) {
  std::vector<double> g(quantGroupCount(view, format), 0.0);
  for (int64_t b = 0; b < view.batch; ++b)
    for (int64_t r = 0; r < view.rows; ++r)
      for (int64_t c = 0; c < view.cols; ++c) {
        const float v = x[(b * view.rows + r) * view.cols + c];
        double& m = g[qtest::groupOf(view, format, b, r, c)];
        if (std::isfinite(v)) m = std::max(m, double(std::fabs(v)));
      }
  return g;
}

// The scales of float_quant.h's formulas, written independently of the kernel.
std::vector<float> referenceScales(const std::vector<float>& x, const OperandView& view,
                                   const QuantFormat& format) {
  const std::vector<double> group = groupAbsmax(x, view, format);
  const double tensor = *std::max_element(group.begin(), group.end());
  const ElementLimits limits = elementLimits(format);
  std::vector<float> scales;
  for (double g : group) {
    if (format.element == Element::kBf16) {
      scales.push_back(1.0f);  // bf16 takes no scale
    } else if (format.scale == ScaleKind::kF32) {
      scales.push_back(float(std::max(g / limits.max, double(FLT_MIN))));
    } else if (format.scale == ScaleKind::kE8M0) {
      int e = -126 + 1 + limits.emax;  // absmax 0
      if (g > 0) std::frexp(g, &e);    // g = m 2^e, m in [0.5, 1): floor(log2 g) = e - 1
      scales.push_back(std::ldexp(1.0f, std::clamp(e - 1 - limits.emax, -126, 127)));
    } else {
      const float global = float(std::max(tensor / limits.max, double(FLT_MIN)));
      int c = 0;  // the smallest c with tensor 2^c >= g
      while (g > 0 && std::ldexp(tensor, c - 1) >= g) --c;
      scales.push_back(g > 0 ? std::max(float(std::ldexp(double(global), c)), FLT_MIN) : global);
    }
  }
  return scales;
}

// s * roundToElement(x * inv) per element, with the element's noise for SR.
std::vector<float> referenceFake(const std::vector<float>& x, const OperandView& view,
                                 const QuantFormat& format, const std::vector<float>& params,
                                 SrStream sr) {
  std::vector<float> out(x.size());
  for (int64_t b = 0; b < view.batch; ++b)
    for (int64_t r = 0; r < view.rows; ++r)
      for (int64_t c = 0; c < view.cols; ++c) {
        const int64_t i = (b * view.rows + r) * view.cols + c;
        const float s = params[qtest::groupOf(view, format, b, r, c)];
        const uint32_t noise = format.rounding == Rounding::kStochastic
                                   ? srNoiseBits16(sr.seed, sr.offset, uint64_t(i))
                                   : 0;
        out[i] = rounded(s * roundToElement(rounded(x[i] * (1.0f / s)), format, noise));
      }
  return out;
}

// Normal data whose channels differ in scale (some by 2^-30 and 2^30, into the subnormal
// and saturating ranges of per-tensor scales), with a zero channel and special values.
std::vector<float> awkwardData(const OperandView& view, uint32_t seed) {
  std::vector<float> x = normalData(view.elements(), seed);
  for (int64_t b = 0; b < view.batch; ++b)
    for (int64_t r = 0; r < view.rows; ++r)
      for (int64_t c = 0; c < view.cols; ++c) {
        const int64_t channel = view.contract_along_cols ? r : c;
        float& v = x[(b * view.rows + r) * view.cols + c];
        v *= float(1 + channel % 5) * (channel % 7 == 3 ? 30.0f : 1.0f);
        if (channel % 11 == 5) v *= 0x1p-30f;
        if (channel % 13 == 6) v *= 0x1p30f;
        if (channel == 2) v = 0.0f;
      }
  x[5] = kNan;
  x[17] = kInf;
  x[x.size() - 3] = -kInf;
  return x;
}

const std::vector<OperandView> kViews = {
    {2, 37, 70, true},     // A [M,K]: blocks 32 + 32 + ragged 6
    {2, 70, 37, false},    // B [K,N]: one scale per column (per-element runs)
    {1, 3, 40000, true},   // long rows: several work units per row, unaligned SR heads
    {2, 300, 64, true},    // rows of a multiple of 32
    {1, 5, 33000, false},  // K along long rows: per-element runs in column chunks
};

const std::vector<const char*> kFormats = {
    "e4m3:tensor:rtn",
    "e5m2:channel:sr",
    "e4m3:block32:rtn:scale=e8m0",
    "e5m2:block7:sr:scale=e8m0",
    "int8:block32:sr:scale=e8m0",
    "int4:block5:rtn:scale=e8m0",
    "e4m3:block16:rtn:scale=two_level",
    "e5m2:block32:sr:scale=two_level",
    "e4m3:channel:sr",
    "e5m2:block24:rtn",
    "bf16:tensor:rtn",
    "bf16:tensor:sr",
};

TEST(FloatQuant, MatchesAScalarReferenceForEveryViewAndFormat) {
  const SrStream sr{1234, 99};
  for (const OperandView& view : kViews) {
    const std::vector<float> x = awkwardData(view, 7);
    for (const char* text : kFormats) {
      const QuantFormat format = QuantFormat::parse(text);
      std::vector<float> params(quantGroupCount(view, format));
      computeEmulatedScales(x, view, format, params);
      EXPECT_EQ(params, referenceScales(x, view, format)) << text;
      // Delayed scaling's entry point gives the same scale from the same absmax values.
      const std::vector<double> group = groupAbsmax(x, view, format);
      const double tensor = *std::max_element(group.begin(), group.end());
      for (size_t g = 0; g < group.size(); ++g) {
        ASSERT_EQ(params[g], emulatedScaleFromAbsmax(group[g], tensor, format)) << text << " " << g;
      }
      std::vector<float> out(x.size());
      fakeQuantize(x, view, format, params, out, sr);
      const std::vector<float> expected = referenceFake(x, view, format, params, sr);
      int64_t bad = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!sameFloat(out[i], expected[i]) && ++bad <= 3) {
          ADD_FAILURE() << text << " view " << view.batch << "x" << view.rows << "x" << view.cols
                        << (view.contract_along_cols ? "" : " (K along rows)") << " element " << i
                        << " x=" << x[i] << ": " << out[i] << " vs " << expected[i];
        }
      }
      EXPECT_EQ(bad, 0) << text;
      // In place gives the same values.
      std::vector<float> in_place = x;
      fakeQuantize(in_place, view, format, params, in_place, sr);
      for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(sameFloat(in_place[i], out[i])) << text;
    }
  }
}

TEST(FloatQuant, IdenticalForAnyThreadCount) {
  const OperandView view{1, 40, 3 * 1024 + 17, false};
  const std::vector<float> x = awkwardData(view, 11);
  for (const char* text :
       {"e4m3:tensor:sr", "e5m2:block32:rtn:scale=e8m0", "e4m3:block32:sr:scale=two_level"}) {
    const QuantFormat format = QuantFormat::parse(text);
    std::vector<float> p1(quantGroupCount(view, format)), p2(p1.size());
    std::vector<float> o1(x.size()), o2(x.size());
    QuantStats s1, s2;
    {
      ThreadCount one(1);
      computeEmulatedScales(x, view, format, p1);
      fakeQuantize(x, view, format, p1, o1, {5, 6});
      s1 = quantStats(x, view, format, {5, 6});
    }
    {
      ThreadCount two(2);
      computeEmulatedScales(x, view, format, p2);
      fakeQuantize(x, view, format, p2, o2, {5, 6});
      s2 = quantStats(x, view, format, {5, 6});
    }
    EXPECT_EQ(p1, p2) << text;
    for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(sameFloat(o1[i], o2[i])) << text << " " << i;
    EXPECT_EQ(s1.mse, s2.mse) << text;
    EXPECT_EQ(s1.mean_square, s2.mean_square) << text;
    EXPECT_EQ(s1.clipped_fraction, s2.clipped_fraction) << text;
  }
}

// ---- Statistics ----

// Per-tensor e4m3 on uniform data (-A, A): the scale maps A to 448, and every value of
// magnitude in the binade [2^e, 2^(e+1)) (element units) rounds on a step q = 2^(e-3)
// (2^-9 below 2^-6). The rounding error is uniform on (-q/2, q/2) for such data, so
//   mse = (1/448) * sum over binades of (length of the binade within [0, 448]) * q^2 / 12,
//   mean_square = 448^2 / 3,
// which gives SQNR = 1536.6 (31.9 dB). Two looser statements hold for any data whose
// values are normal FP8 numbers: |error| <= q/2 <= 2^-4 |x| (SQNR >= 256, 24.1 dB), and
// with the error uniform within each step, q/|x| in (2^-4, 2^-3] bounds the SQNR to
// [12 * 2^6, 12 * 2^8] = [768, 3072] (28.9 to 34.9 dB): Gaussian data must land there.
// Stochastic rounding's error has variance q^2 / 6 (half the SQNR); E5M2 has one mantissa
// bit less and the same binade layout relative to its max (1.75 * 2^15 against
// 1.75 * 2^8): a quarter of the SQNR. With 2^18 samples the noise estimates have a
// relative standard error below 0.3%: a 3% tolerance is > 10 sigma.
TEST(FloatQuant, Fp8SqnrMatchesTheAnalyticValue) {
  const OperandView view{1, 256, 1024, true};
  const std::vector<float> uniform = qtest::uniformData(view.elements(), 1, -2.0f, 2.0f);
  double mse = 0.0;
  for (int e = -6; e <= 8; ++e) {
    const double lo = std::ldexp(1.0, e), hi = std::min(std::ldexp(1.0, e + 1), 448.0);
    mse += (hi - lo) * std::ldexp(1.0, 2 * (e - 3)) / 12.0;
  }
  mse += std::ldexp(1.0, -6) * std::ldexp(1.0, -18) / 12.0;
  const double analytic = (448.0 * 448.0 / 3.0) / (mse / 448.0);
  ASSERT_NEAR(analytic, 1536.6, 0.5);
  const QuantStats e4m3 = quantStats(uniform, view, QuantFormat::parse("e4m3:tensor:rtn"));
  EXPECT_NEAR(e4m3.sqnr / analytic, 1.0, 0.03);
  const QuantStats e4m3_sr =
      quantStats(uniform, view, QuantFormat::parse("e4m3:tensor:sr"), {3, 4});
  EXPECT_NEAR(e4m3_sr.sqnr / (analytic / 2.0), 1.0, 0.03);
  const QuantStats e5m2 = quantStats(uniform, view, QuantFormat::parse("e5m2:tensor:rtn"));
  EXPECT_NEAR(e5m2.sqnr / (analytic / 4.0), 1.0, 0.03);
  EXPECT_EQ(e4m3.clipped_fraction, 0.0);
  EXPECT_EQ(e4m3.underflow_fraction, 0.0);
  EXPECT_NEAR(e4m3.mean_square, 4.0 / 3.0, 0.01);

  const std::vector<float> gauss = normalData(view.elements(), 2);
  for (const char* text : {"e4m3:tensor:rtn", "e4m3:channel:rtn", "mxfp8_e4m3"}) {
    const QuantStats stats = quantStats(gauss, view, QuantFormat::parse(text));
    EXPECT_GE(stats.sqnr, 768.0) << text;
    EXPECT_LE(stats.sqnr, 3072.0) << text;
  }
}

// Outliers: a per-tensor scale set by an outlier pushes every other value into FP8's
// subnormals or to 0, where MX's per-block scales keep ~30 dB. The comparison is over
// the rows without the outlier (their MX blocks are the same as in the whole tensor):
// over the whole tensor the outlier's own energy dominates both SQNRs. With an integer
// grid the per-tensor step is the outlier's for every value, and MXINT8 wins on the
// whole tensor.
TEST(FloatQuant, MxBlockScalesBeatPerTensorScalesOnOutliers) {
  const OperandView view{1, 64, 1024, true};
  std::vector<float> x = normalData(view.elements(), 12);
  x[100] = 1e6f;
  const QuantFormat tensor = QuantFormat::parse("e4m3:tensor:rtn");
  std::vector<float> tensor_scale(1);
  computeEmulatedScales(x, view, tensor, tensor_scale);
  const OperandView rest{1, 63, 1024, true};
  const std::span<const float> rest_x(x.data() + 1024, rest.elements());
  const QuantStats per_tensor = quantStatsWithParams(rest_x, rest, tensor, tensor_scale);
  const QuantStats mx = quantStats(rest_x, rest, QuantFormat::parse("mxfp8_e4m3"));
  EXPECT_LT(sqnrDb(per_tensor), 3.0);
  EXPECT_GT(per_tensor.underflow_fraction, 0.9);
  EXPECT_GT(sqnrDb(mx), 28.0);
  EXPECT_LT(mx.underflow_fraction, 1e-3);

  std::vector<float> y = normalData(view.elements(), 13);
  for (int64_t i = 0; i < view.elements(); i += 1024) y[i] = 100.0f;
  const QuantStats int8 = quantStats(y, view, perTensorFormat(8));
  const QuantStats mxint8 = quantStats(y, view, QuantFormat::parse("mxint8"));
  EXPECT_GT(mxint8.sqnr, 5.0 * int8.sqnr);
}

// quantStats of emulated formats describes the values fakeQuantize gives: its MSE,
// underflow and clipped fractions equal those of an explicit round trip.
TEST(FloatQuant, StatsMatchAnExplicitRoundTrip) {
  for (const OperandView& view : {OperandView{2, 30, 70, true}, OperandView{2, 70, 30, false}}) {
    std::vector<float> x = normalData(view.elements(), 5);
    for (int64_t i = 0; i < view.elements(); i += 7) x[i] *= 20.0f;
    for (int64_t i = 3; i < view.elements(); i += 11) x[i] *= 1e-12f;  // underflow
    for (const char* text : {"e4m3:channel:sr", "mxfp8_e4m3", "mxfp8_e5m2:sr", "mxint8:sr",
                             "e4m3:block16:rtn:scale=two_level", "e5m2:tensor:rtn"}) {
      const QuantFormat format = QuantFormat::parse(text);
      const SrStream sr{77, 3};
      const QuantStats stats = quantStats(x, view, format, sr);
      std::vector<float> params(quantGroupCount(view, format)), back(x.size());
      computeQuantParams(x, view, format, params);
      fakeQuantize(x, view, format, params, back, sr);
      const double edge = clipEdge(format);
      double noise = 0.0, signal = 0.0, underflow = 0.0, clipped = 0.0;
      for (int64_t b = 0; b < view.batch; ++b)
        for (int64_t r = 0; r < view.rows; ++r)
          for (int64_t c = 0; c < view.cols; ++c) {
            const int64_t i = (b * view.rows + r) * view.cols + c;
            const float s = params[qtest::groupOf(view, format, b, r, c)];
            noise += (double(back[i]) - x[i]) * (double(back[i]) - x[i]);
            signal += double(x[i]) * x[i];
            underflow += x[i] != 0.0f && back[i] == 0.0f;
            clipped += std::fabs(rounded(x[i] * (1.0f / s))) > edge;
          }
      const double n = double(x.size());
      EXPECT_NEAR(stats.mse / (noise / n), 1.0, 1e-5) << text;
      EXPECT_NEAR(stats.mean_square / (signal / n), 1.0, 1e-6) << text;
      EXPECT_DOUBLE_EQ(stats.underflow_fraction, underflow / n) << text;
      EXPECT_DOUBLE_EQ(stats.clipped_fraction, clipped / n) << text;
      EXPECT_GT(stats.underflow_fraction, 0.0) << text;
    }
  }
}

TEST(FloatQuant, StatsCountNanAndInfAndExcludeThem) {
  const OperandView view{1, 8, 100, true};
  const std::vector<float> x = normalData(view.elements(), 8);
  std::vector<float> with_special = x, zeroed = x;
  for (int64_t i : {3, 150, 401, 799}) {
    with_special[i] = i % 2 ? kNan : kInf;
    zeroed[i] = 0.0f;
  }
  with_special[402] = -kInf;
  zeroed[402] = 0.0f;
  for (const char* text :
       {"e4m3:channel:rtn", "mxfp8_e5m2:sr", "mxint8", "e4m3:block32:rtn:scale=two_level"}) {
    const QuantFormat format = QuantFormat::parse(text);
    const QuantStats special = quantStats(with_special, view, format, {1, 1});
    const QuantStats plain = quantStats(zeroed, view, format, {1, 1});
    EXPECT_EQ(special.nan_count, 3) << text;  // 3, 401, 799
    EXPECT_EQ(special.inf_count, 2) << text;  // 150, 402
    EXPECT_EQ(special.finite_count, view.elements() - 5) << text;
    // MX e8m0 scales clip some block maxima (float_quant.h); the same ones either way.
    EXPECT_EQ(std::llround(special.clipped_fraction * double(special.finite_count)),
              std::llround(plain.clipped_fraction * double(plain.finite_count)))
        << text;
    EXPECT_FALSE(std::isnan(special.sqnr)) << text;
    // The non-finite values take no part in the scales or sums: the SQNR is that of the
    // tensor with them set to 0 (which add nothing to either sum; SR draws the same noise).
    EXPECT_DOUBLE_EQ(special.sqnr, plain.sqnr) << text;
    EXPECT_EQ(special.absmax, plain.absmax) << text;
  }
}

// The float block sums fall back to double when squares overflow float; scaling the
// data by 2^100 scales every scale and error exactly, so the SQNR is unchanged up to the
// rounding of the sums.
TEST(FloatQuant, StatsOfHugeValuesDoNotOverflow) {
  const OperandView view{1, 16, 300, true};
  const std::vector<float> x = normalData(view.elements(), 6);
  std::vector<float> huge = x;
  for (float& v : huge) v *= 0x1p100f;
  for (const char* text : {"e4m3:channel:rtn", "mxfp8_e4m3"}) {
    const QuantStats normal = quantStats(x, view, QuantFormat::parse(text));
    const QuantStats big = quantStats(huge, view, QuantFormat::parse(text));
    EXPECT_TRUE(std::isfinite(big.sqnr)) << text;
    EXPECT_NEAR(big.sqnr / normal.sqnr, 1.0, 1e-6) << text;  // float vs double block sums
  }
}

// ---- Errors ----

TEST(FloatQuant, IntStorageKernelsRejectEmulatedFormats) {
  const OperandView view{1, 4, 64, true};
  const std::vector<float> x(view.elements(), 1.0f);
  std::vector<uint8_t> qa(x.size());
  std::vector<int8_t> qb(x.size());
  std::vector<float> back(x.size());
  for (const char* text :
       {"e4m3:tensor:rtn", "mxint8", "mxfp8_e5m2:sr", "e4m3:block32:rtn:scale=two_level"}) {
    const QuantFormat format = QuantFormat::parse(text);
    std::vector<float> params(quantGroupCount(view, format));
    computeQuantParams(x, view, format, params);  // dispatches to computeEmulatedScales
    auto expectRejected = [&](auto&& call, const char* what) {
      try {
        call();
        ADD_FAILURE() << what << " accepted " << text;
      } catch (const KernelError& error) {
        const std::string message = error.what();
        EXPECT_NE(message.find("emulated format: use fakeQuantize"), std::string::npos) << message;
        EXPECT_NE(message.find(format.toString()), std::string::npos) << message;
      }
    };
    expectRejected([&] { quantize(x, view, format, params, qa); }, "quantize u8");
    expectRejected([&] { quantize(x, view, format, params, qb); }, "quantize s8");
    expectRejected([&] { quantizeDynamic(x, view, format, params, qa); }, "quantizeDynamic u8");
    expectRejected([&] { quantizeDynamic(x, view, format, params, qb); }, "quantizeDynamic s8");
    expectRejected([&] { dequantize(qa, view, format, params, back); }, "dequantize u8");
    expectRejected([&] { dequantize(qb, view, format, params, back); }, "dequantize s8");
  }
}

TEST(FloatQuant, FakeQuantizeRejectsBadArguments) {
  const OperandView view{1, 4, 64, true};
  std::vector<float> x(view.elements() + 8, 1.0f), out(view.elements());
  const std::span<const float> xs(x.data(), view.elements());
  const QuantFormat mx = QuantFormat::parse("mxfp8_e4m3");
  std::vector<float> params(quantGroupCount(view, mx));
  computeEmulatedScales(xs, view, mx, params);
  EXPECT_NO_THROW(fakeQuantize(xs, view, mx, params, out));
  // Not emulated, or asymmetric: the int8 kernels' formats.
  std::vector<float> p8(4, 1.0f);
  EXPECT_THROW(fakeQuantize(xs, view, perChannelFormat(8), p8, out), KernelError);
  EXPECT_THROW(computeEmulatedScales(xs, view, perChannelFormat(8), p8), KernelError);
  // Sizes.
  EXPECT_THROW(fakeQuantize(std::span<const float>(x.data(), 255), view, mx, params, out),
               KernelError);
  EXPECT_THROW(fakeQuantize(xs, view, mx, params, std::span<float>(out.data(), 255)), KernelError);
  EXPECT_THROW(fakeQuantize(xs, view, mx, std::span<const float>(params.data(), 7), out),
               KernelError);
  // Scales: zero, NaN, and not a power of two for e8m0.
  for (float bad : {0.0f, kNan, kInf, 0.3f}) {
    std::vector<float> p = params;
    p[3] = bad;
    EXPECT_THROW(fakeQuantize(xs, view, mx, p, out), KernelError) << bad;
  }
  std::vector<float> p_f32(1, 0.3f);
  EXPECT_NO_THROW(fakeQuantize(xs, view, QuantFormat::parse("e4m3:tensor:rtn"), p_f32, out));
  // A shifted overlap (in place is fine).
  EXPECT_THROW(fakeQuantize(xs, view, mx, params, std::span<float>(x.data() + 8, 256)),
               KernelError);
  EXPECT_NO_THROW(fakeQuantize(xs, view, mx, params, std::span<float>(x.data(), 256)));
}

}  // namespace
}  // namespace pgq::kernels
