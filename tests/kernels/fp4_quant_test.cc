// The 4-bit formats: E2M1 elements against an enumeration of their 16 codes (as
// float_quant_test.cc does for FP8), NVFP4's two-level scales against Transformer
// Engine's formula written out here, MXFP4's E8M0 scales, 2-D weight tiles, and the
// random Hadamard transform.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/float_quant.h"
#include "kernels/hadamard.h"
#include "kernels/kernel_error.h"
#include "kernels/sr_noise.h"
#include "support/errors.h"
#include "kernels/quant_stats.h"
#include "quant_test_util.h"

namespace pgq::kernels {
namespace {

using qtest::normalData;

// The value of a 4-bit E2M1 code as OCP MX v1.0 (sec. 5.3.3) defines it, independently
// of support/ and kernels/: sign bit, 2 exponent bits with bias 1, 1 mantissa bit; no
// infinities or NaN; exponent 0 is subnormal, mantissa * 2^(1 - bias - 1).
double decodeE2M1(int code) {
  const double sign = (code & 0x8) ? -1.0 : 1.0;
  const int exponent = (code >> 1) & 0x3, mantissa = code & 0x1;
  if (exponent == 0) return sign * 0.5 * mantissa;
  return sign * std::ldexp(1.0 + 0.5 * mantissa, exponent - 1);
}

// Non-negative element values ascending; index parity = code parity (ties to even).
std::vector<double> positiveGrid() {
  std::vector<double> grid;
  for (int code = 0; code < 8; ++code) grid.push_back(decodeE2M1(code));
  return grid;
}

float nearest(float v, const std::vector<double>& grid) {
  const double a = std::fabs(double(v));
  double r = grid.back();
  if (a < r) {
    const size_t hi = size_t(std::upper_bound(grid.begin(), grid.end(), a) - grid.begin());
    const double lo_v = grid[hi - 1], hi_v = grid[hi], mid = 0.5 * (lo_v + hi_v);
    r = a < mid ? lo_v : a > mid ? hi_v : ((hi - 1) % 2 == 0 ? lo_v : hi_v);
  }
  return std::copysign(float(r), v);
}

std::vector<float> fakeWithScale(const std::vector<float>& x, const QuantFormat& f, float scale, SrStream sr = {}) {
  const OperandView view{1, 1, int64_t(x.size()), true};
  std::vector<float> params(quantGroupCount(view, f), scale), out(x.size());
  fakeQuantize(x, view, f, params, out, sr);
  return out;
}

TEST(Fp4Quant, ElementGridIsOcpE2M1) {
  EXPECT_EQ(positiveGrid(), (std::vector<double>{0, 0.5, 1, 1.5, 2, 3, 4, 6}));
  const QuantFormat f = QuantFormat::parse("e2m1:tensor:rtn");
  EXPECT_EQ(f.bits, 4);
  const ElementLimits limits = elementLimits(f);
  EXPECT_EQ(limits.max, 6.0);
  EXPECT_EQ(std::ldexp(1.0, limits.emin - limits.mantissa), 0.5);  // the subnormal step
}

// Every grid value, midpoint (tie) and quarter point, their float neighbours, both
// signs, saturation beyond 6, and random values: the kernel and the scalar reference
// give the enumeration's nearest element (ties to even, saturating).
TEST(Fp4Quant, RoundToNearestMatchesTheEnumeration) {
  const std::vector<double> grid = positiveGrid();
  std::vector<float> probes;
  auto add = [&](float x) {
    for (float s : {x, -x}) probes.insert(probes.end(), {s, std::nextafter(s, 1e30f), std::nextafter(s, -1e30f)});
  };
  for (size_t i = 0; i < grid.size(); ++i) {
    add(float(grid[i]));
    if (i + 1 < grid.size()) {
      add(float(0.5 * (grid[i] + grid[i + 1])));
      add(float(0.25 * grid[i] + 0.75 * grid[i + 1]));
    }
  }
  for (float x : {6.5f, 7.0f, 7.5f, 100.0f, 1e30f, INFINITY, 1e-30f}) add(x);
  const std::vector<float> random = normalData(100000, 11, 3.0f);
  probes.insert(probes.end(), random.begin(), random.end());
  const QuantFormat f = QuantFormat::parse("e2m1:tensor:rtn");
  const std::vector<float> kernel = fakeWithScale(probes, f, 1.0f);
  int64_t bad = 0;
  for (size_t i = 0; i < probes.size(); ++i) {
    const float expected = nearest(probes[i], grid);
    if (roundToElement(probes[i], f) != expected || kernel[i] != expected)
      if (++bad <= 5)
        ADD_FAILURE() << probes[i] << " -> " << roundToElement(probes[i], f) << " / " << kernel[i] << ", nearest "
                      << expected;
  }
  EXPECT_EQ(bad, 0);
  // Saturation: 6.5 and 7 round to 6 (the clip edge is 6 + half the top step 2).
  EXPECT_EQ(roundToElement(7.0f, f), 6.0f);
  EXPECT_EQ(roundToElement(-1e30f, f), -6.0f);
}

// Over all 2^16 noise values, stochastic rounding of v gives the neighbour above exactly
// trunc(frac * 2^16) times, as float_quant.h defines it.
TEST(Fp4Quant, StochasticRoundingHasTheExactMeanOverAllNoise) {
  const std::vector<double> grid = positiveGrid();
  const QuantFormat f = QuantFormat::parse("e2m1:tensor:sr");
  for (float v : {0.3f, -0.7f, 1.1f, 1.25f, -2.6f, 3.3f, 5.0f, 5.9f, 7.0f, 0.01f}) {
    const double a = std::min(std::fabs(double(v)), 6.0);
    const size_t hi_i = size_t(std::lower_bound(grid.begin(), grid.end(), a) - grid.begin());
    const double hi = grid[hi_i], lo = grid[hi == a ? hi_i : hi_i - 1];
    int64_t ups = 0;
    for (uint32_t r = 0; r < 65536; ++r) {
      const float q = roundToElement(v, f, r);
      ASSERT_TRUE(std::fabs(q) == lo || std::fabs(q) == hi) << v << " -> " << q;
      ups += std::fabs(q) == hi && hi != lo;
    }
    const double frac = hi == lo ? 0.0 : (a - lo) / (hi - lo);
    EXPECT_EQ(ups, int64_t(std::trunc(frac * 65536.0))) << v;
  }
  // The kernel draws each element's noise as quantize() does, and stays unbiased.
  const std::vector<float> x(1 << 16, 2.5f);
  const SrStream sr{7, 3};
  const std::vector<float> out = fakeWithScale(x, f, 1.0f, sr);
  for (int64_t i = 0; i < 256; ++i) EXPECT_EQ(out[i], roundToElement(2.5f, f, srNoiseBits16(sr.seed, sr.offset, i)));
  const double mean = std::accumulate(out.begin(), out.end(), 0.0) / double(out.size());
  EXPECT_NEAR(mean, 2.5, 5 * 0.5 / 256.0);
}

// NVFP4 (scale=e4m3): S = 448 * 6 / tensor absmax, s_b = e4m3(block absmax / 6 * S),
// the element e2m1(x * S / s_b) * s_b / S (Transformer Engine's formula).
TEST(Fp4Quant, Nvfp4ScalesAreTransformerEnginesTwoLevelScales) {
  const QuantFormat f = QuantFormat::parse("nvfp4");
  EXPECT_EQ(f.toString(), "e2m1:block16:rtn:scale=e4m3");
  const int64_t rows = 4, cols = 64;
  std::vector<float> x = normalData(rows * cols, 5);
  x[17] = 40.0f;  // one outlier sets the tensor scale
  for (int64_t i = 64; i < 80; ++i) x[i] = 0.0f;  // an all-zero block
  const OperandView view{1, rows, cols, true};
  std::vector<float> params(quantGroupCount(view, f)), out(x.size());
  computeEmulatedScales(x, view, f, params);
  ASSERT_EQ(params.size(), size_t(rows * cols / 16));
  const float encode = float(448.0 * 6.0 / 40.0);
  const QuantFormat e4m3 = QuantFormat::parse("e4m3:tensor:rtn");
  for (int64_t g = 0; g < int64_t(params.size()); ++g) {
    float absmax = 0;
    for (int64_t i = 0; i < 16; ++i) absmax = std::max(absmax, std::fabs(x[g * 16 + i]));
    // TE's compute_decoding_scaling_factor: f32, in this order.
    const float block = roundToElement(absmax * (encode * (1.0f / 6.0f)), e4m3);
    const float expected = absmax == 0.0f ? kMinScale
                           : block == 0.0f ? 0x1p125f
                                           : float(double(block) / double(encode));
    EXPECT_EQ(params[g], expected) << g;
  }
  fakeQuantize(x, view, f, params, out);
  for (size_t i = 0; i < x.size(); ++i) {
    const float s = params[i / 16];
    ASSERT_EQ(out[i], s * nearest(x[i] * (1.0f / s), positiveGrid())) << i;
  }
  EXPECT_NEAR(out[17], 40.0f, 1e-4f);  // the tensor's absmax lands on 6 (its block scale is 448)
}

// A block whose E4M3 decode scale underflows (its absmax below ~2.2e-6 of the tensor's)
// decodes to 0 on the GPU, and its nonzero values count as underflow. It got the smallest
// scale, which saturated 0.001 at 6 * 2^-126 and counted it as clipped (session 17).
TEST(Fp4Quant, Nvfp4BlockWhoseScaleUnderflowsDecodesToZero) {
  const QuantFormat f = QuantFormat::parse("nvfp4");
  std::vector<float> x(32, 0.0f);
  x[0] = 2688.0f;  // S = 1: s_b = G / 6, below E4M3's 2^-10 for G = 0.001
  x[16] = 0.001f;
  x[17] = -0.0005f;
  const OperandView view{1, 1, 32, true};
  std::vector<float> params(2), out(32);
  computeEmulatedScales(x, view, f, params);
  fakeQuantize(x, view, f, params, out);
  EXPECT_EQ(out[0], 2688.0f);
  for (int i = 16; i < 32; ++i) EXPECT_EQ(out[i], 0.0f) << i;
  for (const char* text : {"nvfp4", "e2m1:block16:sr:scale=e4m3"}) {
    const QuantStats stats = quantStats(x, view, QuantFormat::parse(text), {7, 0});
    EXPECT_EQ(stats.clipped_fraction, 0.0) << text;
    EXPECT_EQ(stats.underflow_fraction, 2.0 / 32) << text;
  }
  // An infinity in such a block saturates, finite, as in any other block (a scale of
  // FLT_MAX gave 6 x FLT_MAX = inf).
  x[18] = std::numeric_limits<float>::infinity();
  computeEmulatedScales(x, view, f, params);
  fakeQuantize(x, view, f, params, out);
  EXPECT_TRUE(std::isfinite(out[18])) << out[18];
  EXPECT_EQ(out[16], 0.0f);
}

// s_b = e4m3(G * (S * (1/6))) in f32, as TE computes it: G / 6 * S in double is
// 200.0000075, rounded to f32 it is 200, exactly between E4M3's 192 and 208, where ties
// to even gave 192; TE's f32 product lies above 200 and gives 208 (session 17's hunt).
TEST(Fp4Quant, Nvfp4BlockScaleIsRoundedOnceAsTransformerEngineDoes) {
  const QuantFormat f = QuantFormat::parse("nvfp4");
  std::vector<float> x(32, 0.0f);
  x[0] = 0x1.100a6ap+9f;   // the tensor's absmax T (544.08)
  x[16] = 0x1.e5c974p+7f;  // the second block's absmax G (242.89)
  const float encode = float(2688.0 / double(x[0]));
  ASSERT_GT(double(x[16]) / 6.0 * double(encode), 200.0);
  ASSERT_EQ(float(double(x[16]) / 6.0 * double(encode)), 200.0f);
  const OperandView view{1, 1, 32, true};
  std::vector<float> params(2);
  computeEmulatedScales(x, view, f, params);
  EXPECT_EQ(params[1], float(208.0 / double(encode)));
}

// MXFP4 (OCP MX v1.0): a power-of-two scale 2^(floor(log2 absmax) - 2) per 32.
TEST(Fp4Quant, Mxfp4ScalesArePowersOfTwo) {
  const QuantFormat f = QuantFormat::parse("mxfp4");
  EXPECT_EQ(f.toString(), "e2m1:block32:rtn:scale=e8m0");
  std::vector<float> x = normalData(64, 9);
  x[3] = 5.0f;  // floor(log2 5) = 2 -> scale 1: 5 rounds to 4 or 6 (a tie: 4, even)
  const OperandView view{1, 1, 64, true};
  std::vector<float> params(2), out(64);
  computeEmulatedScales(x, view, f, params);
  EXPECT_EQ(params[0], 1.0f);
  fakeQuantize(x, view, f, params, out);
  EXPECT_EQ(out[3], 4.0f);
}

// 2-D tiles: one scale per 16 x 16 tile of the stored matrix, so a weight quantizes to
// the same values whether the GEMM contracts its rows or its columns.
TEST(Fp4Quant, TwoDimensionalTilesGiveTheSameWeightBothWays) {
  const QuantFormat f = QuantFormat::parse("e2m1:block16x16:rtn:scale=e4m3");
  EXPECT_TRUE(f.block2d);
  EXPECT_EQ(f.toString(), "e2m1:block16x16:rtn:scale=e4m3");
  const int64_t rows = 48, cols = 32;
  const std::vector<float> w = normalData(rows * cols, 21);
  std::vector<float> a(w.size()), b(w.size());
  for (bool along_cols : {true, false}) {
    const OperandView view{1, rows, cols, along_cols};
    std::vector<float> params(quantGroupCount(view, f));
    EXPECT_EQ(params.size(), size_t(3 * 2));
    computeEmulatedScales(w, view, f, params);
    fakeQuantize(w, view, f, params, along_cols ? a : b);
  }
  EXPECT_EQ(a, b);
  // Not the 1-D result: a tile shares its scale across 16 channels.
  const QuantFormat row = QuantFormat::parse("nvfp4");
  std::vector<float> p1(quantGroupCount(OperandView{1, rows, cols, true}, row)), c(w.size());
  computeEmulatedScales(w, OperandView{1, rows, cols, true}, row, p1);
  fakeQuantize(w, OperandView{1, rows, cols, true}, row, p1, c);
  EXPECT_NE(a, c);
}

// y = H D x per 16 along K, for both operands: the product is unchanged in float error.
TEST(Fp4Quant, HadamardTransformLeavesTheProductUnchanged) {
  const int64_t m = 8, k = 64, n = 5;
  const std::vector<float> a = normalData(m * k, 1), b = normalData(k * n, 2);
  std::vector<float> ta(a.size()), tb(b.size()), back(a.size());
  const OperandView va{1, m, k, true}, vb{1, k, n, false};  // A [M,K], B [K,N]
  hadamardTransform(a, va, 42, false, ta);
  hadamardTransform(b, vb, 42, false, tb);
  hadamardTransform(ta, va, 42, true, back);
  double worst = 0, worst_back = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, got = 0;
      for (int64_t p = 0; p < k; ++p) {
        ref += double(a[i * k + p]) * b[p * n + j];
        got += double(ta[i * k + p]) * tb[p * n + j];
      }
      worst = std::max(worst, std::fabs(ref - got));
    }
  for (size_t i = 0; i < a.size(); ++i) worst_back = std::max(worst_back, double(std::fabs(back[i] - a[i])));
  EXPECT_LT(worst, 1e-4);
  EXPECT_LT(worst_back, 1e-6);
  EXPECT_NE(ta, a);
  // The signs change with the step and agree for the same step.
  float s1[16], s2[16], s3[16];
  hadamardSigns(1, s1);
  hadamardSigns(1, s2);
  hadamardSigns(2, s3);
  EXPECT_TRUE(std::equal(s1, s1 + 16, s2));
  EXPECT_FALSE(std::equal(s1, s1 + 16, s3));
  std::vector<float> short_k(24);  // K = 24: no multiple of 16
  EXPECT_THROW(hadamardTransform(short_k, OperandView{1, 1, 24, true}, 0, false, short_k), KernelError);
}

// With rht, fakeQuantize returns D H Q(H D x): the product of two such operands is the
// product of the quantized transformed operands. An outlier's block no longer flushes
// its small neighbours to zero: the transform spreads it over the block. (The SQNR is
// not what improves here: without the transform the outlier holds most of the energy
// and lands exactly on 6, so the flushed neighbours hardly count in it.)
TEST(Fp4Quant, HadamardFormatQuantizesTheTransformedValues) {
  const QuantFormat plain = QuantFormat::parse("nvfp4"), rht = QuantFormat::parse("e2m1:block16:rtn:scale=e4m3:rht");
  EXPECT_TRUE(rht.hadamard);
  const int64_t rows = 32, cols = 64;
  std::vector<float> x = normalData(rows * cols, 3);
  for (int64_t r = 0; r < rows; ++r) x[r * cols + 5] *= 30.0f;  // an outlier column
  const OperandView view{1, rows, cols, true};
  const SrStream step{0, 9};
  auto underflow = [&](const QuantFormat& f) { return quantStats(x, view, f, step).underflow_fraction; };
  EXPECT_GT(underflow(plain), 2 * underflow(rht));
  std::vector<float> params(quantGroupCount(view, rht)), out(x.size()), t(x.size()), tq(x.size()),
      tparams(params.size());
  computeEmulatedScales(x, view, rht, params, step);
  fakeQuantize(x, view, rht, params, out, step);
  hadamardTransform(x, view, step.offset, false, t);
  computeEmulatedScales(t, view, plain, tparams);
  EXPECT_EQ(params, tparams);
  fakeQuantize(t, view, plain, tparams, tq);
  hadamardTransform(tq, view, step.offset, true, tq);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(out[i], tq[i], 1e-5f * (1 + std::fabs(tq[i])));
}

TEST(Fp4Quant, FormatGrammarRefusesWhatCannotRun) {
  EXPECT_THROW(QuantFormat::parse("e4m3:block16:rtn:scale=e4m3"), Error);  // NVFP4 scales need e2m1
  EXPECT_THROW(QuantFormat::parse("int8:channel:rtn:rht"), Error);         // no transform on int grids
  EXPECT_THROW(QuantFormat::parse("e2m1:block16x8:rtn:scale=e4m3"), Error);  // tiles are square
  EXPECT_THROW(QuantFormat::parse("e2m1:channel:rtn:scale=e4m3"), Error);
  EXPECT_EQ(QuantFormat::parse("mxfp4:sr").toString(), "e2m1:block32:sr:scale=e8m0");
  const QuantFormat f = QuantFormat::parse("e2m1:block16x16:sr:scale=e4m3:rht");
  EXPECT_EQ(QuantFormat::parse(f.toString()), f);
  EXPECT_FALSE(f == QuantFormat::parse("e2m1:block16:sr:scale=e4m3:rht"));
}

}  // namespace
}  // namespace pgq::kernels
