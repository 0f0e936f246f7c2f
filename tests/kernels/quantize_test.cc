#include "kernels/quantize.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <tuple>

#include "kernels/cpu_isa.h"
#include "kernels/kernel_error.h"
#include "kernels/quant_clip.h"
#include "kernels/quant_core.h"
#include "kernels/sr_noise.h"
#include "quant_test_util.h"
#include "tests/kernels/wide_paths.h"

namespace pgq::kernels {
namespace {

using qtest::normalData;
using qtest::ThreadCount;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Normal data whose channels differ in scale, with a zero channel and special values.
std::vector<float> awkwardData(const OperandView& view, uint32_t seed) {
  std::vector<float> x = normalData(view.elements(), seed);
  for (int64_t b = 0; b < view.batch; ++b) {
    for (int64_t r = 0; r < view.rows; ++r) {
      for (int64_t c = 0; c < view.cols; ++c) {
        int64_t channel = view.contract_along_cols ? r : c;
        float& v = x[(b * view.rows + r) * view.cols + c];
        v *= float(1 + channel % 5) * (channel % 7 == 3 ? 30.0f : 1.0f);
        if (channel == 2) v = 0.0f;
      }
    }
  }
  x[5] = kNan;
  x[17] = kInf;
  x[x.size() - 3] = -kInf;
  return x;
}

// Stochastic rounding, scalar, from the formula in kernels/quant_core.h: the stored value
// in 16.16 fixed point, T = fma(x, inv * 2^16, (z + o) * 2^16) clamped to the storage grid
// (x * 2^16 first when inv * 2^16 overflows), truncated, plus the element's 16 noise bits
// (kernels/sr_noise.h), floored.
std::vector<int> referenceStochastic(const std::vector<float>& x, const OperandView& view,
                                     const QuantFormat& format, const std::vector<float>& params,
                                     int storage_offset, SrStream sr) {
  const int64_t groups = quantGroupCount(view, format);
  const QuantGrid grid = gridOf(format);
  const float one = 65536.0f;
  std::vector<int> out(x.size());
  for (int64_t b = 0; b < view.batch; ++b) {
    for (int64_t r = 0; r < view.rows; ++r) {
      for (int64_t c = 0; c < view.cols; ++c) {
        const int64_t i = (b * view.rows + r) * view.cols + c;
        const int64_t g = qtest::groupOf(view, format, b, r, c);
        const float inv = 1.0f / params[g];
        const float add = (format.asymmetric ? params[groups + g] : 0.0f) + float(storage_offset);
        const float xv = std::isnan(x[i]) ? 0.0f : x[i];
        const float mul = inv * one;
        float t = std::isinf(mul) ? std::fma(xv * one, inv, add * one)
                                  : std::fma(xv, mul, add * one);
        t = std::fmin(std::fmax(t, float(grid.lo + storage_offset) * one),
                      float(grid.hi + storage_offset) * one);
        const int64_t fixed = int64_t(std::trunc(t)) + srNoiseBits16(sr.seed, sr.offset, i);
        out[i] = int(std::floor(double(fixed) / 65536.0));
      }
    }
  }
  return out;
}

// The stored integers the kernels must produce, by rounding mode.
std::vector<int> referenceStored(const std::vector<float>& x, const OperandView& view,
                                 const QuantFormat& format, const std::vector<float>& params,
                                 int storage_offset, SrStream sr) {
  if (format.rounding == Rounding::kStochastic) {
    return referenceStochastic(x, view, format, params, storage_offset, sr);
  }
  return qtest::referenceQuantize(x, view, format, params, storage_offset);
}

const std::vector<OperandView> kViews = {
    {2, 37, 70, true},    // A [M,K]
    {2, 70, 37, false},   // B [K,N]
    {1, 3, 40000, true},  // long rows: several work units per row
    {2, 300, 64, true},   // rows of a multiple of 32: a unit's rows in one run (RunParams)
    {1, 90, 300, false},  // B [K,N] wider than quantizeDynamic's 128-column chunks
};

const std::vector<const char*> kFormats = {
    "int8:tensor:rtn",           "int8:channel:rtn",          "int7:channel:sr",
    "int8:block16:rtn",          "int5:block24:sr:asym",      "int8:channel:rtn:asym",
    "int6:tensor:sr:asym",       "int2:channel:rtn",          "int4:block7:sr",
    "int8:channel:rtn:clip=p99", "int4:block32:rtn:clip=mse",
};

TEST(Quantize, MatchesScalarReferenceForEveryViewFormatAndSide) {
  const SrStream sr{1234, 99};
  for (const OperandView& view : kViews) {
    std::vector<float> x = awkwardData(view, 7);
    for (const char* text : kFormats) {
      QuantFormat format = QuantFormat::parse(text);
      std::vector<float> params(quantParamCount(view, format));
      computeQuantParams(x, view, format, params);
      std::vector<uint8_t> qa(x.size());
      std::vector<int8_t> qb(x.size());
      quantize(x, view, format, params, qa, sr);
      quantize(x, view, format, params, qb, sr);
      std::vector<int> ref_a =
          referenceStored(x, view, format, params, storageOffset(format, GemmSide::kLhs), sr);
      std::vector<int> ref_b =
          referenceStored(x, view, format, params, storageOffset(format, GemmSide::kRhs), sr);
      int64_t bad = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        if (int(qa[i]) != ref_a[i] || int(qb[i]) != ref_b[i]) {
          if (++bad <= 3) {
            ADD_FAILURE() << text << " view " << view.rows << "x" << view.cols << " element " << i
                          << " x=" << x[i] << ": u8 " << int(qa[i]) << " vs " << ref_a[i] << ", s8 "
                          << int(qb[i]) << " vs " << ref_b[i];
          }
        }
      }
      EXPECT_EQ(bad, 0) << text;
    }
  }
}

TEST(Quantize, DynamicEqualsParamsThenQuantize) {
  const SrStream sr{5, 8};
  // At 1 and 2 threads: the one-pass path must split its rows as the two passes do.
  for (int threads : {1, 2}) {
    ThreadCount tc(threads);
    for (const OperandView& view : kViews) {
      std::vector<float> x = awkwardData(view, 9);
      for (const char* text : kFormats) {
        QuantFormat format = QuantFormat::parse(text);
        std::vector<float> params(quantParamCount(view, format));
        std::vector<float> dyn_params(params.size());
        computeQuantParams(x, view, format, params);
        std::vector<uint8_t> qa(x.size()), dyn_qa(x.size());
        std::vector<int8_t> qb(x.size()), dyn_qb(x.size());
        quantize(x, view, format, params, qa, sr);
        quantize(x, view, format, params, qb, sr);
        quantizeDynamic(x, view, format, dyn_params, dyn_qa, sr);
        EXPECT_EQ(dyn_params, params) << text;
        std::fill(dyn_params.begin(), dyn_params.end(), 0.0f);
        quantizeDynamic(x, view, format, dyn_params, dyn_qb, sr);
        EXPECT_EQ(dyn_params, params) << text;
        EXPECT_EQ(dyn_qa, qa) << text;
        EXPECT_EQ(dyn_qb, qb) << text;
      }
    }
  }
}

// The 512-bit round-to-nearest store (avx512Kernels(), kernels/quantize.cc) against the
// 256-bit one, byte for byte: every view (ragged rows, per-element runs of B, long rows),
// every round-to-nearest format (per tensor, channel, block, asymmetric, clipped), both
// storage types, quantize and quantizeDynamic, at 1 and 2 threads; the data add exact
// half steps, the grid's ends and beyond, subnormals, zeros of both signs, NaN and Inf.
// Where the CPU has no AVX-512 the switch must stay off.
TEST(Quantize, WidePathStoresTheBytesOfThe256BitPath) {
  const testing::WidePaths wide_paths;
  if (!wide_paths.available()) return;  // nothing else runs here: the 256-bit path is the only one
  std::vector<OperandView> views = kViews;
  views.push_back({1, 1, 21, true});   // one row, a masked end (awkwardData needs 18+)
  views.push_back({3, 5, 17, true});   // rows shorter than a vector
  views.push_back({1, 33, 19, false});  // per-element runs with a masked end
  int64_t compared = 0;
  for (int threads : {1, 2}) {
    ThreadCount tc(threads);
    for (const OperandView& view : views) {
      std::vector<float> x = awkwardData(view, 11);
      for (size_t i = 0; i < x.size(); i += 7) {
        switch (i / 7 % 6) {
          case 0: x[i] = -0.0f; break;
          case 1: x[i] = 1e-40f; break;              // subnormal
          case 2: x[i] = std::ldexp(2.5f, -3); break;  // a half step at many scales
          case 3: x[i] = -3e38f; break;               // beyond every grid
          case 4: x[i] = float(int(i % 255) - 127) + 0.5f; break;
          default: break;
        }
      }
      for (const char* text : {"int8:tensor:rtn", "int8:channel:rtn", "int8:block16:rtn",
                               "int8:channel:rtn:asym", "int2:channel:rtn", "int6:tensor:rtn:asym",
                               "int8:channel:rtn:clip=p99", "int4:block32:rtn:clip=mse",
                               "int7:block24:rtn:asym"}) {
        const QuantFormat format = QuantFormat::parse(text);
        std::vector<float> params(quantParamCount(view, format));
        computeQuantParams(x, view, format, params);
        auto run = [&](bool wide) {
          setAvx512Kernels(wide);
          std::vector<uint8_t> qa(x.size()), da(x.size());
          std::vector<int8_t> qb(x.size()), db(x.size());
          std::vector<float> pa(params.size()), pb(params.size());
          quantize(x, view, format, params, qa);
          quantize(x, view, format, params, qb);
          quantizeDynamic(x, view, format, pa, da);
          quantizeDynamic(x, view, format, pb, db);
          return std::make_tuple(qa, qb, da, db, pa, pb);
        };
        const auto wide = run(true);
        const auto narrow = run(false);
        EXPECT_EQ(std::get<0>(wide), std::get<0>(narrow)) << text << " quantize u8";
        EXPECT_EQ(std::get<1>(wide), std::get<1>(narrow)) << text << " quantize s8";
        EXPECT_EQ(std::get<2>(wide), std::get<2>(narrow)) << text << " quantizeDynamic u8";
        EXPECT_EQ(std::get<3>(wide), std::get<3>(narrow)) << text << " quantizeDynamic s8";
        EXPECT_EQ(std::get<4>(wide), std::get<4>(narrow)) << text;
        EXPECT_EQ(std::get<5>(wide), std::get<5>(narrow)) << text;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 2 * 8 * 9);
}

TEST(Quantize, ScalesAreAbsmaxOverQmaxAndIgnoreNonFinite) {
  OperandView view{1, 4, 9, true};
  std::vector<float> x(36, 0.0f);
  for (int c = 0; c < 9; ++c) {
    x[c] = 0.5f * float(c) - 1.0f;  // row 0: absmax 3
    x[9 + c] = float(c) * 1e-3f;    // row 1: absmax 8e-3
  }
  x[2 * 9 + 4] = kNan;  // row 2: zeros and NaN -> the safe scale
  x[3 * 9 + 0] = kInf;  // row 3: Inf ignored, absmax 2
  x[3 * 9 + 1] = -2.0f;
  std::vector<float> params(4);
  computeQuantParams(x, view, perChannelFormat(8), params);
  EXPECT_EQ(params[0], float(3.0 / 127.0));
  EXPECT_EQ(params[1], float(double(8e-3f) / 127.0));
  EXPECT_EQ(params[2], kMinScale);
  EXPECT_EQ(params[3], float(2.0 / 127.0));

  // The same along the columns of a [K,N] view, and per tensor.
  OperandView cols{1, 9, 4, false};
  std::vector<float> xt(36);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 9; ++c) xt[c * 4 + r] = x[r * 9 + c];
  std::vector<float> params_t(4);
  computeQuantParams(xt, cols, perChannelFormat(8), params_t);
  EXPECT_EQ(params_t, params);
  std::vector<float> one(1);
  computeQuantParams(x, view, perTensorFormat(4), one);
  EXPECT_EQ(one[0], float(3.0 / 7.0));
}

// Symmetric scales come from each group's largest magnitude, found on the float bits
// (kernels/quantize.cc finiteMagnitude); a stretch holding NaN or Inf takes the range
// path. Non-finite values in the vector body, in the tail, in a 4-row stripe of a
// column chunk and alone in a row, against the absmax of the finite values in double.
TEST(Quantize, SymmetricScalesSkipNonFiniteValuesWherever) {
  for (bool along_cols : {true, false}) {
    const OperandView view{2, 37, 70, along_cols};
    std::vector<float> x = normalData(view.elements(), 11);
    x[3] = kNan;                       // vector body of the first row/columns
    x[69] = -kInf;                     // tail of row 0
    x[70 * 5 + 40] = kInf;             // body of row 5
    x[70 * 9 + 33] = -FLT_MAX;         // the largest magnitude, finite, negative
    x[70 * 12 + 1] = -7.5f;            // a row whose absmax is negative
    x[70 * 40 + 66] = kNan;            // second batch, tail columns
    for (int c = 0; c < 70; ++c) x[70 * 20 + c] = c == 50 ? kNan : 0.0f;  // NaN and zeros only
    for (QuantFormat format : {perChannelFormat(8), perTensorFormat(8), perBlockFormat(8, 32)}) {
      const std::string text = format.toString() + (along_cols ? " along cols" : " along rows");
      std::vector<float> params(quantParamCount(view, format));
      computeQuantParams(x, view, format, params);
      std::vector<double> absmax(params.size(), 0.0);
      for (int64_t b = 0; b < view.batch; ++b)
        for (int64_t r = 0; r < view.rows; ++r)
          for (int64_t c = 0; c < view.cols; ++c) {
            const float v = x[(b * view.rows + r) * view.cols + c];
            double& a = absmax[qtest::groupOf(view, format, b, r, c)];
            if (std::isfinite(v)) a = std::max(a, std::fabs(double(v)));
          }
      for (size_t g = 0; g < params.size(); ++g)
        EXPECT_EQ(params[g], float(std::max(absmax[g] / 127.0, double(kMinScale)))) << text << " group " << g;
    }
  }
}

// Per-column ranges are folded in chunks of columns and, where those are few, slabs of
// rows, then combined (kernels/quantize.cc groupRanges). Views whose columns span
// several chunks, with and without slabs, a ragged last block of rows, and NaN/Inf in
// different slabs and chunks, against the per-row path on the transpose (the same groups
// in the same order), and for one and two threads.
TEST(Quantize, PerColumnRangesEqualThePerRowPathOnTheTranspose) {
  for (const int64_t batch : {1, 2}) {
    for (const int64_t cols : {2100, 70}) {
      const int64_t rows = 150;
      const OperandView view{batch, rows, cols, false}, transposed{batch, cols, rows, true};
      std::vector<float> x = normalData(view.elements(), 5), xt(x.size());
      auto at = [&](int64_t b, int64_t r, int64_t c) -> float& { return x[(b * rows + r) * cols + c]; };
      at(0, 3, 7) = kNan;                   // first slab, first chunk
      at(0, 70, cols - 10) = -kInf;         // another slab, the last chunk's tail
      at(0, 149, cols - 50) = 40.0f;        // the last row, the largest value of its column
      at(batch - 1, 100, cols / 2) = kInf;  // the second batch
      at(batch - 1, 140, 5) = -30.0f;       // the ragged block of rows
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) xt[(b * cols + c) * rows + r] = at(b, r, c);
      for (const char* text : {"int8:channel:rtn", "int8:block32:rtn", "int8:channel:rtn:asym", "int4:block32:sr:asym"}) {
        const QuantFormat format = QuantFormat::parse(text);
        const std::string what = fmt::format("{} over [{}, {}, {}]", text, batch, rows, cols);
        std::vector<float> by_cols(quantParamCount(view, format)), by_rows(quantParamCount(transposed, format));
        std::vector<float> one_thread(by_cols.size());
        computeQuantParams(xt, transposed, format, by_rows);
        {
          ThreadCount two(2);
          computeQuantParams(x, view, format, by_cols);
        }
        {
          ThreadCount one(1);
          computeQuantParams(x, view, format, one_thread);
        }
        EXPECT_EQ(by_cols, by_rows) << what;
        EXPECT_EQ(one_thread, by_cols) << what;
      }
    }
  }
}

TEST(Quantize, AsymmetricParamsCoverTheRangeWithAZeroPoint) {
  OperandView view{1, 1, 5, true};
  std::vector<float> x = {2.0f, 3.0f, 10.0f, 4.0f, 7.5f};  // all positive: range [0, 10]
  QuantFormat format = QuantFormat::parse("int8:tensor:rtn:asym");
  std::vector<float> params(2);
  computeQuantParams(x, view, format, params);
  EXPECT_EQ(params[0], float(10.0 / 255.0));
  EXPECT_EQ(params[1], 0.0f);
  x = {-1.0f, 3.0f, 0.5f, 2.0f, 1.0f};  // range [-1, 3]
  computeQuantParams(x, view, format, params);
  EXPECT_EQ(params[0], float(4.0 / 255.0));
  EXPECT_EQ(params[1], std::nearbyint(1.0 / double(params[0])));  // 64
  // Asymmetric spends every level on [-1, 3]: the round-trip error is at most half a step.
  std::vector<uint8_t> q(5);
  std::vector<float> back(5);
  quantize(x, view, format, params, q);
  dequantize(q, view, format, params, back);
  for (int i = 0; i < 5; ++i) EXPECT_LE(std::fabs(back[i] - x[i]), 0.5f * params[0] * 1.0001f);
}

TEST(Quantize, SpecialValuesAndSaturation) {
  OperandView view{1, 1, 8, true};
  std::vector<float> x = {kNan, kInf, -kInf, 1000.0f, -1000.0f, 0.0f, 1.0f, -1.0f};
  std::vector<float> params = {1.0f / 127.0f};  // range [-1, 1]
  QuantFormat format = perTensorFormat(8);
  std::vector<uint8_t> qa(8);
  std::vector<int8_t> qb(8);
  for (Rounding rounding : {Rounding::kNearest, Rounding::kStochastic}) {
    format.rounding = rounding;
    quantize(x, view, format, params, qa);
    quantize(x, view, format, params, qb);
    // NaN -> the zero point; +-Inf and out-of-range values saturate, never wrap.
    EXPECT_EQ(std::vector<int>(qa.begin(), qa.end()),
              (std::vector<int>{128, 255, 1, 255, 1, 128, 255, 1}));
    EXPECT_EQ(std::vector<int>(qb.begin(), qb.end()),
              (std::vector<int>{0, 127, -127, 127, -127, 0, 127, -127}));
  }
  // 7-bit lhs storage stays within [1, 127] (the exactness limit on CPUs without VNNI).
  quantize(x, view, perTensorFormat(7), std::vector<float>{1.0f / 63.0f}, qa);
  EXPECT_EQ(std::vector<int>(qa.begin(), qa.end()),
            (std::vector<int>{64, 127, 1, 127, 1, 64, 127, 1}));
}

TEST(Quantize, RoundTripErrorIsHalfAStep) {
  OperandView view{3, 20, 33, false};
  std::vector<float> x = normalData(view.elements(), 3);
  for (const char* text : {"int8:channel:rtn", "int6:block8:rtn", "int8:tensor:rtn:asym"}) {
    QuantFormat format = QuantFormat::parse(text);
    std::vector<float> params(quantParamCount(view, format));
    computeQuantParams(x, view, format, params);
    std::vector<int8_t> q(x.size());
    std::vector<float> back(x.size());
    quantize(x, view, format, params, q);
    dequantize(q, view, format, params, back);
    for (int64_t b = 0; b < view.batch; ++b)
      for (int64_t r = 0; r < view.rows; ++r)
        for (int64_t c = 0; c < view.cols; ++c) {
          int64_t i = (b * view.rows + r) * view.cols + c;
          float step = params[qtest::groupOf(view, format, b, r, c)];
          ASSERT_LE(std::fabs(back[i] - x[i]), 0.5001f * step) << text << " element " << i;
        }
  }
}

TEST(Quantize, IdenticalForAnyThreadCountAndChunking) {
  const int64_t n = 3 * 16384 + 64;
  std::vector<float> x = normalData(n, 11);
  for (const char* text : {"int8:tensor:sr", "int7:tensor:rtn", "int8:tensor:sr:asym"}) {
    QuantFormat format = QuantFormat::parse(text);
    // One long row (chunked within the row) and 64 rows of 769 elements (whole rows per
    // unit, rows not aligned to the 64-element Philox groups): the same flat indices, so
    // the same scale and the same noise.
    OperandView long_row{1, 1, n, true};
    OperandView rows{1, 64, n / 64, true};
    ASSERT_EQ(rows.elements(), n);
    std::vector<float> params(quantParamCount(long_row, format));
    computeQuantParams(x, long_row, format, params);
    std::vector<uint8_t> q1(n), q2(n), q3(n);
    {
      ThreadCount one(1);
      quantize(x, long_row, format, params, q1, {5, 6});
    }
    {
      ThreadCount two(2);
      quantize(x, long_row, format, params, q2, {5, 6});
      quantize(x, rows, format, params, q3, {5, 6});
    }
    EXPECT_EQ(q1, q2) << text;
    EXPECT_EQ(q1, q3) << text;
  }
}

// Mean of many stochastic roundings of the same value, with 16 random bits per element
// (bias < 2^-16 of a step, far below the tolerance), for the s8 storage (signed values,
// truncation toward zero) and the u8 storage of an asymmetric format (zero point and
// storage offset folded into the fixed point).
TEST(Quantize, StochasticRoundingIsUnbiased) {
  const int64_t n = 1 << 18;
  OperandView view{1, 64, n / 64, true};
  QuantFormat format = perTensorFormat(8, Rounding::kStochastic);
  std::vector<float> params = {1.0f};  // step 1: grid integers are the values themselves
  std::vector<int8_t> q(n);
  for (float base : {-3.0f, 10.0f}) {
    for (double frac : {0.0625, 0.25, 0.3333, 0.5, 0.7, 0.97}) {
      const float value = base + float(frac);
      std::vector<float> x(n, value);
      quantize(x, view, format, params, q, {2024, 1});
      double sum = 0.0;
      for (int8_t v : q) {
        ASSERT_TRUE(v == int8_t(base) || v == int8_t(base + 1)) << int(v);
        sum += v;
      }
      const double exact_frac = double(value) - double(base);
      const double sigma = std::sqrt(exact_frac * (1.0 - exact_frac) / double(n));
      EXPECT_NEAR(sum / double(n), double(value), 5.0 * sigma + 1e-6) << value;
    }
  }
  // Asymmetric, lhs storage: step 0.5, zero point 100, storage offset 0 (u8 grid
  // [0, 255]): x quantizes to x / 0.5 + 100.
  QuantFormat asym = QuantFormat::parse("int8:tensor:sr:asym");
  std::vector<float> asym_params = {0.5f, 100.0f};
  std::vector<uint8_t> qa(n);
  const int offset = storageOffset(asym, GemmSide::kLhs);
  for (double value : {-20.3, -0.01, 0.123456, 37.77}) {
    std::vector<float> x(n, float(value));
    quantize(x, view, asym, asym_params, qa, {99, 5});
    double sum = 0.0;
    for (uint8_t v : qa) sum += v;
    const double exact = double(float(value)) / 0.5 + 100.0 + offset;
    const double frac = exact - std::floor(exact);
    const double sigma = std::sqrt(frac * (1.0 - frac) / double(n));
    EXPECT_NEAR(sum / double(n), exact, 5.0 * sigma + 1e-6) << value;
  }
}

// Tiny scales (inv * 2^16 overflows float) take the prescaled path, per group, and give
// exactly the formula's result, also next to groups of ordinary scale (per-column
// weights, where one run mixes both).
TEST(Quantize, StochasticRoundingOfTinyScalesIsExact) {
  const SrStream sr{31, 4};
  for (const OperandView& view :
       {OperandView{1, 6, 77, true}, OperandView{1, 77, 6, false}, OperandView{1, 6, 64, true}}) {
    QuantFormat format = perChannelFormat(8, Rounding::kStochastic);
    std::vector<float> x = normalData(view.elements(), 17);
    for (int64_t b = 0; b < view.rows; ++b) {
      for (int64_t c = 0; c < view.cols; ++c) {
        const int64_t channel = view.contract_along_cols ? b : c;
        // Channels 1 and 4 hold values ~1e-35 (scales ~1e-37 < 2^-112).
        if (channel == 1 || channel == 4) x[b * view.cols + c] *= 1e-35f;
      }
    }
    std::vector<float> params(quantParamCount(view, format));
    computeQuantParams(x, view, format, params);
    ASSERT_TRUE(std::isinf(65536.0f / params[1]));
    std::vector<int8_t> q(x.size());
    quantize(x, view, format, params, q, sr);
    std::vector<int> ref = referenceStochastic(x, view, format, params, 0, sr);
    int64_t bad = 0;
    int64_t nonzero_tiny = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      bad += int(q[i]) != ref[i];
      const int64_t channel = view.contract_along_cols ? int64_t(i) / view.cols
                                                       : int64_t(i) % view.cols;
      nonzero_tiny += (channel == 1 || channel == 4) && q[i] != 0;
    }
    EXPECT_EQ(bad, 0);
    EXPECT_GT(nonzero_tiny, int64_t(x.size()) / 10);  // not flushed to zero or saturated only
  }
}

// Every implementation of the noise (VAES in registers, AES-NI and portable through the
// buffer) gives the same stored integers, for runs with ragged heads and tails.
TEST(Quantize, StochasticRoundingIsTheSameForEveryNoiseImplementation) {
  const int64_t len = 1000;
  std::vector<float> x = normalData(len, 23, 3.0f);
  const float inv = 10.0f, add = 3.0f, scale = 0.1f;
  detail::RunParams p{&inv, &add, &scale};
  struct Collect {
    std::vector<int32_t>* out;
    void operator()(int64_t index, const detail::Lanes& l, int valid) {
      alignas(32) int32_t t[32];
      for (int k = 0; k < 4; ++k) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(t + 8 * k), l.ti[k]);
      }
      for (int j = 0; j < valid; ++j) (*out)[size_t(index - 13 + j)] = t[j];
    }
  };
  std::vector<int32_t> expected;
  for (SrNoiseIsa isa : {SrNoiseIsa::kPortable, SrNoiseIsa::kAesNi, SrNoiseIsa::kVaes}) {
    if (!srNoiseIsaSupported(isa)) continue;
    detail::SrState state({8, 9}, isa);
    std::vector<int32_t> got(len, -1000);
    Collect sink{&got};
    // Element indices 13 .. 1012: a head of 19 elements, 30 full blocks, a tail of 21.
    detail::processRun<true, false>(x.data(), 13, len, p, -127, 127, &state, sink);
    if (expected.empty()) {
      expected = got;
      for (int64_t i = 0; i < len; ++i) {
        ASSERT_GE(got[i], -127);
        ASSERT_LE(got[i], 127);
      }
    } else {
      EXPECT_EQ(got, expected) << srNoiseIsaName(isa);
    }
  }
}

TEST(Quantize, StochasticRoundingDependsOnSeedAndOffset) {
  const int64_t n = 4096;
  OperandView view{1, 1, n, true};
  QuantFormat format = perTensorFormat(8, Rounding::kStochastic);
  std::vector<float> params = {1.0f};
  std::vector<float> x(n, 0.5f);
  auto run = [&](SrStream sr) {
    std::vector<int8_t> q(n);
    quantize(x, view, format, params, q, sr);
    return q;
  };
  auto differing = [&](const std::vector<int8_t>& a, const std::vector<int8_t>& b) {
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) count += a[i] != b[i];
    return count;
  };
  std::vector<int8_t> base = run({1, 0});
  EXPECT_EQ(base, run({1, 0}));
  // Independent draws at 0.5 differ with probability 1/2: 2048 +- 32 expected.
  EXPECT_GT(differing(base, run({2, 0})), 1700);
  EXPECT_GT(differing(base, run({1, 1})), 1700);
  EXPECT_GT(differing(base, run({1, uint64_t(1) << 32})), 1700);
}

TEST(Quantize, PercentileClippingIgnoresOutliers) {
  OperandView view{1, 1, 1000, true};
  std::vector<float> x = qtest::uniformData(1000, 5, -1.0f, 1.0f);
  x[500] = 100.0f;
  std::vector<float> params(1);
  computeQuantParams(x, view, QuantFormat::parse("int8:tensor:rtn:clip=p99"), params);
  EXPECT_LE(params[0], 1.0f / 127.0f);
  EXPECT_GT(params[0], 0.9f / 127.0f);
  computeQuantParams(x, view, QuantFormat::parse("int8:tensor:rtn:clip=p100"), params);
  EXPECT_EQ(params[0], float(100.0 / 127.0));
  // Asymmetric: each tail on its own.
  std::vector<float> p2(2);
  computeQuantParams(x, view, QuantFormat::parse("int8:tensor:rtn:asym:clip=p99"), p2);
  EXPECT_LT(p2[0], 2.0f / 255.0f);
}

TEST(Quantize, MseClippingNeverIncreasesTheError) {
  OperandView view{1, 8, 512, true};
  std::vector<float> gauss = normalData(view.elements(), 9);
  std::vector<float> uniform = qtest::uniformData(view.elements(), 9, -1.0f, 1.0f);
  for (int bits : {3, 4, 8}) {
    QuantFormat plain = perChannelFormat(bits);
    QuantFormat mse = plain;
    mse.clipping = Clipping::kMse;
    for (const std::vector<float>* x : {&gauss, &uniform}) {
      std::vector<float> p_plain(8), p_mse(8);
      computeQuantParams(*x, view, plain, p_plain);
      computeQuantParams(*x, view, mse, p_mse);
      for (int r = 0; r < 8; ++r) {
        std::span<const float> row(x->data() + r * 512, 512);
        double e_plain = groupMse(row, p_plain[r], 0.0f, plain);
        double e_mse = groupMse(row, p_mse[r], 0.0f, plain);
        EXPECT_LE(e_mse, e_plain);
        EXPECT_LE(p_mse[r], p_plain[r]);
        // Uniform data: absmax scaling puts a grid point on the edge of the range and
        // wastes half a cell; the MSE-optimal grid has 2*qmax+1 equal cells covering the
        // range, i.e. the ratio 2 qmax / (2 qmax + 1): 0.857 at 3 bits, 0.996 at 8 bits.
        if (x == &uniform) {
          double qmax = (1 << (bits - 1)) - 1;
          EXPECT_NEAR(p_mse[r] / p_plain[r], 2 * qmax / (2 * qmax + 1), 0.05) << bits;
        }
      }
    }
  }
  // Gaussian data at 4 bits clips well inside the range (the MSE optimum is ~2.5 sigma
  // against an absmax of ~3 sigma over 512 samples).
  QuantFormat mse4 = QuantFormat::parse("int4:tensor:rtn:clip=mse");
  std::vector<float> p(1), p_plain(1);
  computeQuantParams(gauss, view, mse4, p);
  computeQuantParams(gauss, view, perTensorFormat(4), p_plain);
  EXPECT_LT(p[0], 0.9f * p_plain[0]);
}

TEST(Quantize, RejectsMismatchedBuffersAndParams) {
  OperandView view{1, 4, 8, true};
  QuantFormat format = perChannelFormat(8);
  std::vector<float> x(32, 1.0f), params(4);
  std::vector<uint8_t> q(32);
  computeQuantParams(x, view, format, params);
  EXPECT_THROW(computeQuantParams(std::span<const float>(x.data(), 31), view, format, params),
               KernelError);
  EXPECT_THROW(computeQuantParams(x, view, format, std::span<float>(params.data(), 3)),
               KernelError);
  EXPECT_THROW(quantize(x, view, format, params, std::span<uint8_t>(q.data(), 31)), KernelError);
  EXPECT_THROW(quantize(x, view, perTensorFormat(8), params, q), KernelError);
  EXPECT_THROW(quantize(x, OperandView{1, 0, 8, true}, format, params, q), KernelError);
  EXPECT_THROW(quantize(x, view, perBlockFormat(8, 0), params, q), KernelError);
  std::vector<float> bad = params;
  bad[1] = 0.0f;
  EXPECT_THROW(quantize(x, view, format, bad, q), KernelError);
  bad[1] = kNan;
  EXPECT_THROW(quantize(x, view, format, bad, q), KernelError);
  QuantFormat asym = QuantFormat::parse("int8:channel:rtn:asym");
  std::vector<float> pa(8);
  computeQuantParams(x, view, asym, pa);
  pa[5] = 3.5f;  // zero points are integers
  EXPECT_THROW(quantize(x, view, asym, pa, q), KernelError);
  pa[5] = 256.0f;
  EXPECT_THROW(quantize(x, view, asym, pa, q), KernelError);
}

}  // namespace
}  // namespace pgq::kernels
