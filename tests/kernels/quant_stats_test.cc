#include "kernels/quant_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu_isa.h"
#include "kernels/float_quant.h"
#include "kernels/kernel_error.h"
#include "quant_test_util.h"
#include "tests/kernels/wide_paths.h"

namespace pgq::kernels {
namespace {

using qtest::ThreadCount;
using qtest::uniformData;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Every field of a statistic, bit for bit.
void expectSameStats(const QuantStats& a, const QuantStats& b, const std::string& where) {
  EXPECT_EQ(a.count, b.count) << where;
  EXPECT_EQ(a.finite_count, b.finite_count) << where;
  EXPECT_EQ(a.nan_count, b.nan_count) << where;
  EXPECT_EQ(a.inf_count, b.inf_count) << where;
  EXPECT_EQ(a.absmax, b.absmax) << where;
  EXPECT_EQ(a.mean_square, b.mean_square) << where;
  EXPECT_EQ(a.mse, b.mse) << where;
  EXPECT_EQ(a.sqnr, b.sqnr) << where;
  EXPECT_EQ(a.zero_fraction, b.zero_fraction) << where;
  EXPECT_EQ(a.underflow_fraction, b.underflow_fraction) << where;
  EXPECT_EQ(a.clipped_fraction, b.clipped_fraction) << where;
}

// Uniform data on (-a, a) quantized per tensor with absmax scaling at b bits: the step
// is d = a / qmax (qmax = 2^(b-1) - 1, absmax ~ a), the rounding error is uniform on
// (-d/2, d/2) for every b >= 2 (the grid covers the range), so
//   SQNR = (a^2 / 3) / (d^2 / 12) = 4 qmax^2      ~ 6.02 b dB - 20 log10(2^b / (2^b - 2)).
// Stochastic rounding adds the variance f(1-f) d^2 with f uniform: E = d^2 / 6, so
//   SQNR_sr = 2 qmax^2  (3 dB less).
// With n = 2^18 samples the noise estimate has a relative standard error of
// sqrt(0.8 / n) = 0.18% (RTN) and the absmax is within 1e-5 of a: 2% is > 10 sigma.
TEST(QuantStats, UniformDataMatchesTheAnalyticSqnr) {
  OperandView view{1, 256, 1024, true};
  std::vector<float> x = uniformData(view.elements(), 1, -2.0f, 2.0f);
  double previous = INFINITY;
  for (int bits : {8, 7, 6, 5, 4, 3, 2}) {
    const double qmax = (1 << (bits - 1)) - 1;
    QuantStats rtn = quantStats(x, view, perTensorFormat(bits));
    EXPECT_NEAR(rtn.sqnr / (4 * qmax * qmax), 1.0, 0.02) << bits << " bits";
    EXPECT_LT(rtn.sqnr, previous) << "SQNR must fall with every bit removed";
    previous = rtn.sqnr;
    QuantStats sr = quantStats(x, view, perTensorFormat(bits, Rounding::kStochastic), {3, 4});
    EXPECT_NEAR(sr.sqnr / (2 * qmax * qmax), 1.0, 0.02) << bits << " bits, SR";
    EXPECT_NEAR(rtn.mean_square, 4.0 / 3.0, 0.01);
    EXPECT_NEAR(rtn.absmax, 2.0, 1e-4);
    EXPECT_EQ(rtn.count, view.elements());
    EXPECT_EQ(rtn.finite_count, view.elements());
  }
  // The ~6 dB per bit rule.
  EXPECT_NEAR(sqnrDb(quantStats(x, view, perTensorFormat(8))) -
                  sqnrDb(quantStats(x, view, perTensorFormat(7))),
              6.02, 0.1);
}

// Q(x) by an explicit computeQuantParams + quantize + dequantize, the reference the
// statistics are checked against. Storage: int8_t (the GEMM rhs's) or uint8_t (the lhs's,
// which coherentErrorMeanSquare uses; with stochastic rounding the two can differ in an
// element in ~10^5, where adding the lhs's storage offset before rounding moves a
// rounding threshold by an ulp).
template <typename Storage = int8_t>
std::vector<float> roundTrip(const std::vector<float>& x, const OperandView& view, const QuantFormat& format,
                             SrStream sr) {
  std::vector<float> params(quantParamCount(view, format));
  computeQuantParams(x, view, format, params);
  std::vector<float> back(x.size());
  if (format.isEmulated()) {  // FP8, MX, NVFP4: f32 on the format's grid
    fakeQuantize(x, view, format, params, back, sr);
    return back;
  }
  std::vector<Storage> q(x.size());
  quantize(x, view, format, params, q, sr);
  dequantize(q, view, format, params, back);
  return back;
}

// The statistics describe exactly the arithmetic of computeQuantParams + quantize:
// the MSE equals that of an explicit quantize/dequantize round trip.
TEST(QuantStats, MatchesAnExplicitRoundTrip) {
  for (OperandView view : {OperandView{2, 30, 70, true}, OperandView{2, 70, 30, false}}) {
    std::vector<float> x = qtest::normalData(view.elements(), 5);
    for (int64_t i = 0; i < view.elements(); i += 7) x[i] *= 20.0f;
    for (const char* text : {"int8:channel:rtn", "int7:channel:sr", "int4:block16:sr:asym",
                             "int5:tensor:rtn:clip=mse", "int8:channel:rtn:clip=p99"}) {
      QuantFormat format = QuantFormat::parse(text);
      SrStream sr{77, 3};
      QuantStats stats = quantStats(x, view, format, sr);
      std::vector<float> back = roundTrip(x, view, format, sr);
      double noise = 0.0, signal = 0.0, underflow = 0.0;
      for (size_t i = 0; i < x.size(); ++i) {
        noise += (double(back[i]) - x[i]) * (double(back[i]) - x[i]);
        signal += double(x[i]) * x[i];
        underflow += x[i] != 0.0f && back[i] == 0.0f;
      }
      const double n = double(x.size());
      EXPECT_NEAR(stats.mse / (noise / n), 1.0, 1e-5) << text;
      EXPECT_NEAR(stats.mean_square / (signal / n), 1.0, 1e-6) << text;
      EXPECT_NEAR(stats.sqnr / (signal / noise), 1.0, 1e-5) << text;
      EXPECT_DOUBLE_EQ(stats.underflow_fraction, underflow / n) << text;
    }
  }
}

// The coherent error is the mean over rows of (sum_k e_k)^2 / K, computed here from an
// explicit quantize/dequantize round trip, for both layouts and several formats.
double coherentReference(const std::vector<float>& x, const OperandView& view, const QuantFormat& format, SrStream sr) {
  std::vector<float> back = roundTrip<uint8_t>(x, view, format, sr);
  double total = 0.0;
  for (int64_t b = 0; b < view.batch; ++b)
    for (int64_t ch = 0; ch < view.channels(); ++ch) {
      double s = 0.0;
      for (int64_t k = 0; k < view.contractLength(); ++k) {
        int64_t r = view.contract_along_cols ? ch : k, c = view.contract_along_cols ? k : ch;
        size_t i = static_cast<size_t>((b * view.rows + r) * view.cols + c);
        const double e = double(back[i]) - double(x[i]);
        s += std::isfinite(e) ? e : 0.0;  // a non-finite element counts as no error
      }
      total += s * s / double(view.contractLength());
    }
  return total / double(view.batch * view.channels());
}

TEST(CoherentError, MatchesAnExplicitRoundTripInBothLayouts) {
  // Small shapes with remainders, and ones wider than a vector and a column block.
  for (OperandView view : {OperandView{2, 30, 70, true}, OperandView{2, 70, 30, false}, OperandView{2, 40, 517, true},
                           OperandView{2, 90, 600, false}}) {
    std::vector<float> x = qtest::normalData(view.elements(), 9);
    x[3] = std::numeric_limits<float>::quiet_NaN();
    x[static_cast<size_t>(view.elements() / 2)] = std::numeric_limits<float>::infinity();
    for (const char* text : {"int8:channel:rtn", "int4:tensor:sr", "int4:block16:rtn:asym"}) {
      QuantFormat format = QuantFormat::parse(text);
      std::vector<float> params(quantParamCount(view, format));
      computeQuantParams(x, view, format, params);
      SrStream sr{5, 2};
      double got = coherentErrorMeanSquare(x, view, format, params, sr);
      EXPECT_NEAR(got / coherentReference(x, view, format, sr), 1.0, 1e-9) << text << " " << view.rows << "x" << view.cols;
      EXPECT_TRUE(std::isfinite(got)) << text;
      {
        ThreadCount two(2);
        EXPECT_EQ(coherentErrorMeanSquare(x, view, format, params, sr), got) << text << ": thread count changed it";
      }
      ThreadCount one(1);
      EXPECT_EQ(coherentErrorMeanSquare(x, view, format, params, sr), got) << text << ": thread count changed it";
    }
  }
}

// Independent zero-mean errors sum like a random walk: the coherent error equals the
// mse (within sampling noise), for stochastic rounding and for round to nearest of data
// spread over many steps. Round to nearest of small values of one sign, flushed to 0
// below one step, is biased: every error of a row has the same sign and the coherent
// error is ~K times the mse; stochastic rounding of the same data is unbiased again.
TEST(CoherentError, UnbiasedNoiseGivesTheMseAndFlushedValuesDoNot) {
  OperandView view{1, 64, 512, true};
  std::vector<float> spread = uniformData(view.elements(), 3, -2.0f, 2.0f);
  for (const char* text : {"int4:tensor:rtn", "int4:tensor:sr", "int8:channel:sr"}) {
    QuantFormat format = QuantFormat::parse(text);
    std::vector<float> params(quantParamCount(view, format));
    computeQuantParams(spread, view, format, params);
    QuantStats stats = quantStatsWithParams(spread, view, format, params, {1, 0});
    EXPECT_NEAR(coherentErrorMeanSquare(spread, view, format, params, {1, 0}) / stats.mse, 1.0, 0.25) << text;
  }
  // Each row: one large value sets the scale, the rest are small and positive.
  std::vector<float> small = uniformData(view.elements(), 4, 0.001f, 0.02f);
  for (int64_t r = 0; r < view.rows; ++r) small[static_cast<size_t>(r * view.cols)] = 4.0f;
  QuantFormat rtn = QuantFormat::parse("int4:channel:rtn"), sr = QuantFormat::parse("int4:channel:sr");
  std::vector<float> params(quantParamCount(view, rtn));
  computeQuantParams(small, view, rtn, params);
  double mse = quantStatsWithParams(small, view, rtn, params).mse;
  EXPECT_GT(coherentErrorMeanSquare(small, view, rtn, params) / mse, 100.0);
  double sr_mse = quantStatsWithParams(small, view, sr, params, {2, 0}).mse;
  EXPECT_NEAR(coherentErrorMeanSquare(small, view, sr, params, {2, 0}) / sr_mse, 1.0, 0.25);
}

TEST(QuantStats, AllZeroAndConstantTensors) {
  OperandView view{1, 16, 64, true};
  std::vector<float> zeros(view.elements(), 0.0f);
  for (const char* text :
       {"int8:channel:rtn", "int4:tensor:sr:asym", "int8:block16:rtn:clip=mse"}) {
    QuantStats stats = quantStats(zeros, view, QuantFormat::parse(text));
    EXPECT_EQ(stats.sqnr, kSqnrCap) << text;  // error exactly 0: the cap, never 0/0
    EXPECT_EQ(stats.mse, 0.0);
    EXPECT_EQ(stats.zero_fraction, 1.0);
    EXPECT_EQ(stats.underflow_fraction, 0.0);
    EXPECT_EQ(stats.absmax, 0.0);
  }
  std::vector<float> constant(view.elements(), -0.37f);
  for (const char* text : {"int8:channel:rtn", "int8:tensor:rtn", "int3:tensor:sr"}) {
    QuantStats stats = quantStats(constant, view, QuantFormat::parse(text));
    // A constant lands on a grid end up to float rounding of x * (1/s) * s.
    EXPECT_GE(stats.sqnr, 1e10) << text;
    EXPECT_LE(stats.sqnr, kSqnrCap) << text;
    EXPECT_EQ(stats.zero_fraction, 0.0);
  }
  EXPECT_NEAR(sqnrDb(kSqnrCap), 120.0, 1e-9);
}

TEST(QuantStats, NanAndInfAreCountedAndExcluded) {
  OperandView view{1, 8, 100, true};
  std::vector<float> x = qtest::normalData(view.elements(), 8);
  std::vector<float> with_special = x;
  std::vector<float> zeroed = x;
  for (int64_t i : {3, 150, 401, 799}) {
    with_special[i] = i % 2 ? kNan : kInf;
    zeroed[i] = 0.0f;
  }
  with_special[402] = -kInf;
  zeroed[402] = 0.0f;
  for (const char* text : {"int8:channel:rtn", "int6:tensor:sr:asym", "int4:block32:rtn"}) {
    QuantFormat format = QuantFormat::parse(text);
    QuantStats special = quantStats(with_special, view, format);
    QuantStats plain = quantStats(zeroed, view, format);
    EXPECT_EQ(special.nan_count, 3) << text;  // 3, 401, 799
    EXPECT_EQ(special.inf_count, 2) << text;  // 150, 402
    EXPECT_EQ(special.finite_count, view.elements() - 5);
    EXPECT_FALSE(std::isnan(special.sqnr));
    // Non-finite values take no part in the scales or the sums: the SQNR is that of the
    // tensor with those elements set to 0 (which add nothing to either sum).
    EXPECT_DOUBLE_EQ(special.sqnr, plain.sqnr) << text;
    EXPECT_EQ(special.absmax, plain.absmax);
  }
  std::vector<float> all_nan(view.elements(), kNan);
  QuantStats stats = quantStats(all_nan, view, perChannelFormat(8));
  EXPECT_EQ(stats.nan_count, view.elements());
  EXPECT_EQ(stats.finite_count, 0);
  EXPECT_EQ(stats.sqnr, kSqnrCap);
  EXPECT_EQ(stats.mean_square, 0.0);
}

// Squares of |x| > ~1e19 overflow float: the sums fall back to double and the SQNR is
// that of the same data at a normal scale (quantization is scale invariant).
TEST(QuantStats, HugeValuesDoNotOverflowTheSums) {
  OperandView view{1, 16, 300, true};
  std::vector<float> x = qtest::normalData(view.elements(), 6);
  std::vector<float> huge = x;
  for (float& v : huge) v *= 1e30f;
  for (const char* text : {"int8:channel:rtn", "int4:tensor:rtn:asym"}) {
    QuantStats normal = quantStats(x, view, QuantFormat::parse(text));
    QuantStats big = quantStats(huge, view, QuantFormat::parse(text));
    EXPECT_TRUE(std::isfinite(big.sqnr)) << text;
    EXPECT_NEAR(big.sqnr / normal.sqnr, 1.0, 1e-3) << text;
    EXPECT_NEAR(big.mean_square / (normal.mean_square * 1e60), 1.0, 1e-3) << text;
  }
}

// Squares of |x| < ~1e-19 are subnormal floats (and below ~1e-23, zero): the sums of a
// unit that small are taken in double, so the statistics are those of the same data at a
// normal scale, for every kind of format, alone and in the many-format pass.
TEST(QuantStats, TinyValuesDoNotUnderflowTheSums) {
  OperandView view{1, 16, 300, true};
  std::vector<float> x = qtest::normalData(view.elements(), 6);
  const float scale = std::ldexp(1.0f, -70);
  std::vector<float> tiny = x;
  for (float& v : tiny) v *= scale;
  const std::vector<const char*> texts = {"int8:channel:rtn", "int8:channel:sr", "int4:tensor:rtn:asym",
                                          "e4m3:tensor:rtn", "bf16:tensor:rtn", "e4m3:block32:rtn:scale=e8m0"};
  std::vector<QuantFormat> formats;
  std::vector<std::vector<float>> buffers;
  for (const char* text : texts) {
    formats.push_back(QuantFormat::parse(text));
    buffers.emplace_back(quantParamCount(view, formats.back()));
  }
  computeQuantParams(tiny, view, formats, std::vector<std::span<float>>(buffers.begin(), buffers.end()), {});
  const std::vector<std::span<const float>> params(buffers.begin(), buffers.end());
  const std::vector<QuantStats> many = quantStatsWithParams(tiny, view, formats, params, {}, true);
  for (size_t f = 0; f < formats.size(); ++f) {
    QuantStats normal = quantStats(x, view, formats[f]);
    for (const QuantStats& small : {quantStats(tiny, view, formats[f]), many[f]}) {
      EXPECT_NEAR(small.sqnr / normal.sqnr, 1.0, 1e-6) << texts[f];
      EXPECT_NEAR(small.mean_square / (normal.mean_square * double(scale) * scale), 1.0, 1e-6) << texts[f];
    }
  }
}

TEST(QuantStats, UnderflowAndClippedFractions) {
  OperandView view{1, 1, 1000, true};
  std::vector<float> x(1000, 1e-3f);
  x[0] = 1000.0f;
  x[1] = 0.0f;
  QuantStats stats = quantStats(x, view, perTensorFormat(8));
  // Step 1000/127 ~ 7.9: every 1e-3 underflows to 0.
  EXPECT_DOUBLE_EQ(stats.underflow_fraction, 998.0 / 1000.0);
  EXPECT_DOUBLE_EQ(stats.zero_fraction, 1.0 / 1000.0);
  EXPECT_EQ(stats.clipped_fraction, 0.0);
  // Clipping at the 99th percentile saturates the outlier.
  stats = quantStats(x, view, QuantFormat::parse("int8:tensor:rtn:clip=p99"));
  EXPECT_DOUBLE_EQ(stats.clipped_fraction, 1.0 / 1000.0);
  EXPECT_DOUBLE_EQ(stats.underflow_fraction, 0.0);
}

// quantStats skips the clipped count where its own scales cannot clip, and counts NaN
// only in blocks with a non-finite lane: every statistic equals the full computation's
// (params given, clipped counted everywhere), bit for bit, on data with outliers, ties
// at the grid's ends, zeros, NaN and Inf, for every kind of scale.
TEST(QuantStats, ShortcutsChangeNoStatistic) {
  for (OperandView view : {OperandView{2, 30, 70, true}, OperandView{1, 64, 96, false}}) {
    std::vector<float> x = qtest::normalData(view.elements(), 15);
    for (int64_t i = 0; i < view.elements(); i += 13) x[i] *= 50.0f;
    for (int64_t i = 5; i < view.elements(); i += 97) x[i] = 0.0f;
    x[17] = kNan;
    x[400] = -kInf;
    for (const char* text : {"int8:channel:rtn", "int7:channel:sr", "int4:block16:sr:asym", "int8:tensor:rtn:asym",
                             "e4m3:tensor:rtn", "e5m2:channel:sr", "e4m3:block32:rtn:scale=e8m0",
                             "e5m2:block32:sr:scale=two_level", "e2m1:block16:rtn:scale=e4m3", "bf16",
                             "int5:tensor:rtn:clip=mse"}) {
      const QuantFormat format = QuantFormat::parse(text);
      const SrStream sr{3, 4};
      std::vector<float> params(quantParamCount(view, format));
      computeQuantParams(x, view, format, params, sr);
      const QuantStats fast = quantStats(x, view, format, sr);
      const QuantStats full = quantStatsWithParams(x, view, format, params, sr, /*params_from_x=*/false);
      EXPECT_EQ(fast.nan_count, 1) << text;
      expectSameStats(fast, full, text);
    }
  }
}

// Full finite blocks of 32 take an unmasked path (kernels/quant_stats.cc), blocks with a
// NaN, an Inf or padding a masked one: counts and absmax are those of an explicit round
// trip wherever the largest magnitude, the zeros and the specials sit.
TEST(QuantStats, MaskedAndUnmaskedBlocksCountAlike) {
  for (OperandView view : {OperandView{2, 9, 100, true}, OperandView{1, 70, 30, false}}) {
    for (int64_t peak : {int64_t{40}, int64_t{131}}) {  // in a finite block; beside the NaN at 130
      std::vector<float> x = qtest::normalData(view.elements(), 21);
      // Zeros of both signs: full blocks count every Q(x) = 0 as underflow and take the
      // zeros off at the end (StatsSink::fast_zeros), which needs Q(0) = 0 on every grid.
      for (int64_t i = 2; i < view.elements(); i += 11) x[i] = i % 2 == 0 ? 0.0f : -0.0f;
      for (int64_t i = 7; i < view.elements(); i += 29) x[i] *= 1e-4f;   // some underflow
      for (int64_t i = 9; i < view.elements(); i += 31) x[i] *= 1e-12f;  // below e5m2's too
      x[130] = kNan;
      x[260] = -kInf;
      x[peak] = -40.0f;
      for (const char* text : {"int8:channel:rtn", "int4:block32:rtn:asym", "int8:tensor:sr", "int4:block32:sr:asym",
                               "e5m2:tensor:sr", "e4m3:block32:rtn:scale=e8m0", "e2m1:block16:sr:scale=e4m3"}) {
        const QuantFormat format = QuantFormat::parse(text);
        const SrStream sr{5, 1};
        const QuantStats stats = quantStats(x, view, format, sr);
        const std::vector<float> back = roundTrip(x, view, format, sr);
        int64_t finite = 0, zeros = 0, underflow = 0;
        double absmax = 0.0;
        for (size_t i = 0; i < x.size(); ++i) {
          if (!std::isfinite(x[i])) continue;
          ++finite;
          zeros += x[i] == 0.0f;
          underflow += x[i] != 0.0f && back[i] == 0.0f;
          absmax = std::max(absmax, std::fabs(double(x[i])));
        }
        const std::string where = std::string(text) + " peak at " + std::to_string(peak);
        EXPECT_EQ(stats.finite_count, finite) << where;
        EXPECT_EQ(stats.nan_count, 1) << where;
        EXPECT_EQ(stats.inf_count, 1) << where;
        EXPECT_EQ(stats.absmax, absmax) << where;
        EXPECT_DOUBLE_EQ(stats.zero_fraction, double(zeros) / double(finite)) << where;
        EXPECT_DOUBLE_EQ(stats.underflow_fraction, double(underflow) / double(finite)) << where;
        EXPECT_GT(underflow, 0) << where;
        // MX's power-of-two scales may clip (OCP MX); the integer grids' scales cannot.
        if (!format.isEmulated()) {
          EXPECT_EQ(stats.clipped_fraction, 0.0) << where;
        }
      }
    }
  }
}

// The many-format pass (kernels/quant_stats_fused.cc) measures formats that share a walk
// together and must give what measuring each alone gives, bit for bit: per channel along
// either side (broadcast and per-element runs), per tensor, per block, both roundings,
// ragged rows and stochastic heads, NaN and Inf (single-format blocks inside a fused run),
// overflowing float sums (the unit summed again in double), scales so small that
// stochastic rounding prescales, formats that cannot join (asymmetric, clipping, FP8),
// a list longer than one pass takes, and stochastic formats that take the products of the
// round-to-nearest ones with their scales. The scales of the formats, computed together,
// equal each format's own.
TEST(QuantStats, ManyFormatsAtOnceEqualEachAlone) {
  const std::vector<std::vector<const char*>> lists = {
      {"int8:channel:rtn", "int7:channel:rtn", "int8:channel:sr", "int7:channel:sr"},
      {"int8:channel:sr", "int8:channel:rtn"},  // a gradient operand on a VNNI CPU
      // Stochastic formats paired with the round-to-nearest ones of their scales, listed
      // in another order (kPaired in quant_stats_fused.cc).
      {"int7:channel:rtn", "int8:channel:rtn", "int8:channel:sr", "int7:channel:sr"},
      {"int8:tensor:rtn", "int6:tensor:rtn", "int4:tensor:sr", "int8:tensor:sr"},
      {"int8:block32:rtn", "int7:block32:rtn", "int5:block32:rtn", "int8:block32:sr", "int7:block32:sr"},
      {"int8:channel:rtn", "int8:channel:rtn:asym", "int7:channel:rtn", "e4m3:channel:rtn", "int6:channel:rtn",
       "int5:channel:rtn", "int4:channel:rtn", "int3:channel:rtn", "int7:tensor:rtn:clip=mse"},
      // One fusable format alone takes the fused pass as well (a forward operand).
      {"int8:channel:rtn"},
      {"int8:tensor:sr"},
      {"int8:block32:rtn"},
  };
  for (OperandView view : {OperandView{2, 30, 70, true}, OperandView{1, 64, 96, false}, OperandView{1, 3, 40000, true},
                           OperandView{2, 33, 64, false}}) {
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<float> x = qtest::normalData(view.elements(), 31 + variant);
      for (int64_t i = 3; i < view.elements(); i += 17) x[i] = 0.0f;
      for (int64_t i = 5; i < view.elements(); i += 23) x[i] *= 1e-3f;
      if (variant == 1) {  // non-finite values
        x[40] = kNan;
        x[view.elements() - 7] = kInf;
      } else if (variant == 2) {  // squares overflow float in some units
        for (int64_t i = 0; i < view.elements(); i += 301) x[i] = 3e20f;
      } else if (variant == 3) {  // tiny scales: stochastic rounding prescales (< ~2^-112)
        for (float& v : x) v *= 1e-36f;
      }
      for (const auto& list : lists) {
        std::vector<QuantFormat> formats;
        std::vector<std::vector<float>> buffers;
        const SrStream sr{7, 3};
        for (const char* text : list) {
          formats.push_back(QuantFormat::parse(text));
          buffers.emplace_back(quantParamCount(view, formats.back()));
        }
        // The scales too: the formats' shared range pass gives each format's own.
        const std::vector<std::span<float>> out(buffers.begin(), buffers.end());
        computeQuantParams(x, view, formats, out, sr);
        for (size_t f = 0; f < formats.size(); ++f) {
          std::vector<float> alone(buffers[f].size());
          computeQuantParams(x, view, formats[f], alone, sr);
          ASSERT_EQ(alone, buffers[f]) << list[f];
        }
        const std::vector<std::span<const float>> params(buffers.begin(), buffers.end());
        for (int threads : {1, 2}) {
          ThreadCount t(threads);
          const std::vector<QuantStats> many = quantStatsWithParams(x, view, formats, params, sr, true);
          ASSERT_EQ(many.size(), formats.size());
          for (size_t f = 0; f < formats.size(); ++f) {
            const QuantStats alone = quantStatsWithParams(x, view, formats[f], params[f], sr, true);
            expectSameStats(many[f], alone,
                            fmt::format("{} on [{},{},{},{}] variant {}, {} threads", list[f], view.batch, view.rows,
                                        view.cols, view.contract_along_cols, variant, threads));
          }
        }
      }
    }
  }
}

// Where the CPU has AVX-512, the fused pass takes two blocks per 512-bit pass
// (quant_stats_fused.cc, fusedPair): the statistics must be those of the 256-bit pass bit
// for bit, with a non-finite value in the first or the second block of a pair (the pair
// goes block by block), runs of an odd number of blocks and ragged ends, broadcast and
// per-element scales, both roundings, paired and not. On a CPU without AVX-512 the switch
// must stay off.
TEST(QuantStats, WidePathGivesTheStatisticsOfThe256BitPath) {
  const testing::WidePaths wide_paths;
  if (!wide_paths.available()) return;  // the 256-bit path is the only one here
  const std::vector<std::vector<const char*>> lists = {
      {"int8:channel:rtn"},
      {"int8:channel:rtn", "int8:channel:sr"},
      {"int8:channel:sr", "int7:channel:rtn", "int8:channel:rtn"},
      {"int8:tensor:rtn", "int4:tensor:sr"},
      {"int8:block32:rtn", "int7:block32:sr"},
      {"int8:channel:sr"},
  };
  int64_t compared = 0;
  for (OperandView view : {OperandView{2, 30, 224, true}, OperandView{1, 96, 160, false}, OperandView{1, 3, 40000, true},
                           OperandView{1, 5, 100, true}}) {
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<float> x = qtest::normalData(view.elements(), 71 + variant);
      for (int64_t i = 3; i < view.elements(); i += 13) x[i] = i % 2 ? 0.0f : -0.0f;
      if (variant == 1) {  // a NaN in a pair's first block, an Inf in another pair's second
        x[5] = kNan;
        x[view.elements() / 2 + 40] = -kInf;
      } else if (variant == 2) {  // squares overflow float: units summed again in double
        for (int64_t i = 0; i < view.elements(); i += 301) x[i] = 3e20f;
      }
      for (const auto& list : lists) {
        std::vector<QuantFormat> formats;
        std::vector<std::vector<float>> buffers;
        const SrStream sr{5, 2};
        for (const char* text : list) {
          formats.push_back(QuantFormat::parse(text));
          buffers.emplace_back(quantParamCount(view, formats.back()));
          computeQuantParams(x, view, formats.back(), buffers.back(), sr);
        }
        const std::vector<std::span<const float>> params(buffers.begin(), buffers.end());
        for (int threads : {1, 2}) {
          ThreadCount t(threads);
          setAvx512Kernels(true);
          const std::vector<QuantStats> wide = quantStatsWithParams(x, view, formats, params, sr, true);
          setAvx512Kernels(false);
          const std::vector<QuantStats> narrow = quantStatsWithParams(x, view, formats, params, sr, true);
          for (size_t f = 0; f < formats.size(); ++f) {
            expectSameStats(wide[f], narrow[f],
                            fmt::format("{} on [{},{},{},{}] variant {}, {} threads", list[f], view.batch, view.rows,
                                        view.cols, view.contract_along_cols, variant, threads));
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 4 * 3 * 2 * 11);  // views, variants, thread counts, formats
}

TEST(QuantStats, IndependentOfThreadCount) {
  OperandView view{1, 40, 3000, false};
  std::vector<float> x = qtest::normalData(view.elements(), 12);
  QuantFormat format = QuantFormat::parse("int7:channel:sr");
  QuantStats one, two;
  {
    ThreadCount t(1);
    one = quantStats(x, view, format, {9, 9});
  }
  {
    ThreadCount t(2);
    two = quantStats(x, view, format, {9, 9});
  }
  EXPECT_EQ(one.sqnr, two.sqnr);
  EXPECT_EQ(one.mse, two.mse);
  EXPECT_EQ(one.mean_square, two.mean_square);
}

TEST(QuantStats, RejectsBadArguments) {
  OperandView view{1, 4, 8, true};
  std::vector<float> x(32, 1.0f);
  EXPECT_THROW(quantStats(std::span<const float>(x.data(), 30), view, perChannelFormat(8)),
               KernelError);
  EXPECT_THROW(quantStats(x, view, perChannelFormat(9)), KernelError);
  EXPECT_THROW(quantStats(x, view, perBlockFormat(8, 0)), KernelError);
  EXPECT_THROW(quantStats(x, OperandView{1, 4, 0, true}, perChannelFormat(8)), KernelError);
  std::vector<float> params(3);
  EXPECT_THROW(quantStatsWithParams(x, view, perChannelFormat(8), params), KernelError);
}

}  // namespace
}  // namespace pgq::kernels
