#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu_isa.h"
#include "kernels/gemm.h"
#include "kernels/kernel_error.h"
#include "kernels/optim.h"
#include "kernels/quant_stats.h"
#include "quant_test_util.h"

namespace pgq::kernels {
namespace {

// Params with the given scale and random integer zero points (asymmetric formats).
std::vector<float> makeParams(const OperandView& view, const QuantFormat& format, float scale,
                              uint32_t seed) {
  const int64_t groups = quantGroupCount(view, format);
  std::vector<float> params(quantParamCount(view, format), scale);
  if (format.asymmetric) {
    QuantGrid grid = gridOf(format);
    std::vector<int> zps = qtest::randomInts<int>(groups, seed, grid.lo, grid.hi);
    for (int64_t g = 0; g < groups; ++g) params[groups + g] = float(zps[g]);
  }
  return params;
}

// The storage zero point of element (b, row, col) of a GEMM operand as stored.
int64_t storedZero(const OperandView& view, const QuantFormat& format,
                   const std::vector<float>& params, GemmSide side, int64_t b, int64_t r,
                   int64_t c) {
  int64_t zp = 0;
  if (format.asymmetric) {
    zp = int64_t(params[quantGroupCount(view, format) + qtest::groupOf(view, format, b, r, c)]);
  }
  return zp + storageOffset(format, side);
}

struct Case {
  const char* lhs;
  const char* rhs;
  int a_lo, a_hi;  // stored u8 range to draw from
  int b_lo, b_hi;  // stored s8 range to draw from
};

// Full-range stored bytes in every pair of formats that runs exactly on this CPU:
// u8 0..255 against a 7-bit rhs (s8 -64..63), and a 7-bit lhs (u8 0..127) against
// s8 -128..127; on a VNNI CPU also 8 x 8. The s32 result must equal an exact integer
// reference bit for bit (zero points included), and with unit scales the f32 result is
// that integer rounded to float.
TEST(Int8Gemm, BitExactOnFullRangeInputs) {
  std::vector<Case> cases = {
      {"int8:channel:rtn", "int7:channel:rtn", 0, 255, -64, 63},
      {"int7:channel:sr", "int8:channel:rtn", 0, 127, -128, 127},
      {"int8:tensor:rtn:asym", "int7:channel:rtn", 0, 255, -64, 63},
      {"int8:channel:rtn:asym", "int7:channel:rtn:asym", 0, 255, -64, 63},
      {"int7:channel:rtn:asym", "int8:tensor:rtn:asym", 0, 127, -128, 127},
      {"int8:block16:rtn:asym", "int7:block24:rtn", 0, 255, -64, 63},
      {"int7:block32:rtn", "int8:block32:rtn:asym", 0, 127, -128, 127},
  };
  if (int8Caps().vnni) cases.push_back({"int8:channel:rtn", "int8:channel:rtn", 0, 255, -128, 127});
  const std::vector<GemmShape> shapes = {
      {1, 37, 29, 53}, {1, 64, 48, 300}, {3, 16, 40, 24}, {1, 32, 32, 1024}, {2, 9, 70, 100}};
  for (const Case& test : cases) {
    const QuantFormat fa = QuantFormat::parse(test.lhs);
    const QuantFormat fb = QuantFormat::parse(test.rhs);
    for (GemmShape s : shapes) {
      for (int t = 0; t < 4; ++t) {
        s.trans_a = t & 1;
        s.trans_b = t & 2;
        const OperandView va = lhsView(s), vb = rhsView(s);
        std::vector<uint8_t> qa =
            qtest::randomInts<uint8_t>(s.sizeA(), 1 + t, test.a_lo, test.a_hi);
        std::vector<int8_t> qb = qtest::randomInts<int8_t>(s.sizeB(), 2 + t, test.b_lo, test.b_hi);
        // Extremes in the first elements: the worst case for 16-bit pair sums.
        for (int i = 0; i < 8 && i < s.k; ++i) {
          qa[i] = uint8_t(test.a_hi);
          qb[i] = int8_t(i % 2 ? test.b_lo : test.b_hi);
        }
        std::vector<float> pa = makeParams(va, fa, 1.0f, 3);
        std::vector<float> pb = makeParams(vb, fb, 1.0f, 4);
        auto zero_a = [&](int64_t b, int64_t m, int64_t k) {
          return s.trans_a ? storedZero(va, fa, pa, GemmSide::kLhs, b, k, m)
                           : storedZero(va, fa, pa, GemmSide::kLhs, b, m, k);
        };
        auto zero_b = [&](int64_t b, int64_t k, int64_t n) {
          return s.trans_b ? storedZero(vb, fb, pb, GemmSide::kRhs, b, n, k)
                           : storedZero(vb, fb, pb, GemmSide::kRhs, b, k, n);
        };
        std::vector<int64_t> ref = qtest::referenceGemmS64(s, qa, qb, zero_a, zero_b);
        std::vector<int32_t> c32(s.sizeC());
        int8GemmS32(s, qa, fa, pa, qb, fb, pb, c32);
        std::vector<float> c(s.sizeC());
        int8Gemm(s, qa, fa, pa, qb, fb, pb, c);
        int64_t wrong = 0;
        for (size_t i = 0; i < ref.size(); ++i) wrong += c32[i] != ref[i];
        EXPECT_EQ(wrong, 0) << test.lhs << " x " << test.rhs << " m=" << s.m << " n=" << s.n
                            << " k=" << s.k << " batch=" << s.batch << " ta=" << s.trans_a
                            << " tb=" << s.trans_b;
        const bool one_segment =
            fa.granularity != Granularity::kPerBlock && fb.granularity != Granularity::kPerBlock;
        for (size_t i = 0; i < ref.size() && one_segment; ++i) {
          ASSERT_EQ(c[i], float(ref[i])) << test.lhs << " x " << test.rhs << " element " << i;
        }
      }
    }
  }
}

// A weight gradient's share of the gradient norm, summed while the rescale writes C: the
// same C, and sumSquares(C) bit for bit, for one segment with N % 8 == 0 (the fused pass:
// blocks of 4096 that cross rows and batch items, with and without zero-point
// compensation) and otherwise (N % 8 != 0, per-block segments: a pass after), at 1 and 2
// threads. Random scales make every square a different float.
TEST(Int8Gemm, SumsTheSquaresOfItsOutputAsSumSquaresDoes) {
  struct SquaresCase {
    const char* lhs;
    const char* rhs;
    GemmShape shape;
  };
  const std::vector<SquaresCase> cases = {
      {"int7:channel:rtn", "int7:channel:rtn", {1, 37, 24, 70}},
      {"int7:channel:rtn", "int7:channel:rtn", {1, 700, 48, 16, true, false}},
      {"int7:channel:rtn:asym", "int7:channel:rtn:asym", {3, 130, 40, 33}},
      {"int7:channel:rtn", "int7:channel:rtn", {1, 20, 13, 9}},
      {"int7:block16:rtn", "int7:channel:rtn", {1, 50, 24, 48}},
  };
  for (const SquaresCase& test : cases) {
    const QuantFormat fa = QuantFormat::parse(test.lhs), fb = QuantFormat::parse(test.rhs);
    const GemmShape s = test.shape;
    SCOPED_TRACE(fmt::format("{} x {}, batch {} m {} n {} k {}", test.lhs, test.rhs, s.batch, s.m, s.n, s.k));
    const std::vector<uint8_t> qa = qtest::randomInts<uint8_t>(s.sizeA(), 11, 0, 127);
    const std::vector<int8_t> qb = qtest::randomInts<int8_t>(s.sizeB(), 12, -64, 63);
    std::vector<float> pa = makeParams(lhsView(s), fa, 1.0f, 13), pb = makeParams(rhsView(s), fb, 1.0f, 14);
    const std::vector<float> sa = qtest::uniformData(quantGroupCount(lhsView(s), fa), 15, 1e-3f, 2e-3f),
                             sb = qtest::uniformData(quantGroupCount(rhsView(s), fb), 16, 1e-3f, 2e-3f);
    std::copy(sa.begin(), sa.end(), pa.begin());
    std::copy(sb.begin(), sb.end(), pb.begin());
    std::vector<float> plain(s.sizeC());
    int8Gemm(s, qa, fa, pa, qb, fb, pb, plain);
    for (int threads : testing::kThreadCounts) {
      testing::ThreadCount guard(threads);
      std::vector<float> c(s.sizeC(), -1.0f);
      double squares = -1.0;
      int8Gemm(s, qa, fa, pa, qb, fb, pb, c, &squares);
      EXPECT_EQ(std::memcmp(c.data(), plain.data(), c.size() * sizeof(float)), 0) << threads;
      const double want = sumSquares(plain.data(), s.sizeC());
      EXPECT_EQ(std::memcmp(&squares, &want, sizeof(double)), 0) << threads << ": " << squares << " vs " << want;
    }
  }
}

// Why the 7-bit restriction exists: oneDNN's u8 x s8 GEMM on full-range data, called
// directly. Without VNNI the 16-bit pair sums of vpmaddubsw saturate and many outputs
// are wrong (one measurement saw 4050 of 4096); with VNNI the result is exact.
TEST(Int8Gemm, FullEightBitTrapOnThisCpu) {
  const int64_t m = 64, k = 256, n = 64;  // [M,K] x [K,N] -> [M,N]
  std::vector<uint8_t> a = qtest::randomInts<uint8_t>(m * k, 5, 0, 255);
  std::vector<int8_t> b = qtest::randomInts<int8_t>(k * n, 6, -128, 127);
  for (int64_t i = 0; i < m * k; i += 2) a[i] = 255;  // make large pair sums common
  std::vector<int32_t> c(m * n);
  using dt = dnnl::memory::data_type;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  dnnl::memory::desc a_md({m, k}, dt::u8, {k, 1}), b_md({k, n}, dt::s8, {n, 1}),
      c_md({m, n}, dt::s32, {n, 1});
  dnnl::matmul mm(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), engine));
  dnnl::memory a_mem(a_md, engine, a.data()), b_mem(b_md, engine, b.data()),
      c_mem(c_md, engine, c.data());
  mm.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  stream.wait();
  GemmShape s{1, m, n, k};
  std::vector<int64_t> ref = qtest::referenceGemmS64(
      s, a, b, [](int64_t, int64_t, int64_t) { return 0; },
      [](int64_t, int64_t, int64_t) { return 0; });
  int64_t wrong = 0;
  for (size_t i = 0; i < ref.size(); ++i) wrong += c[i] != ref[i];
  if (int8Caps().vnni) {
    EXPECT_EQ(wrong, 0) << int8Caps().describe();
  } else {
    EXPECT_GT(wrong, int64_t(ref.size()) / 2) << int8Caps().describe();
  }
}

TEST(Int8Gemm, RejectsFormatsThatCouldSaturate) {
  GemmShape s{1, 8, 8, 16};
  std::vector<uint8_t> qa(s.sizeA(), 128);
  std::vector<int8_t> qb(s.sizeB(), 1);
  std::vector<float> c(s.sizeC());
  QuantFormat f8 = perChannelFormat(8);
  std::vector<float> pa(quantParamCount(lhsView(s), f8), 1.0f);
  std::vector<float> pb(quantParamCount(rhsView(s), f8), 1.0f);
  if (int8Caps().vnni) {
    EXPECT_NO_THROW(int8Gemm(s, qa, f8, pa, qb, f8, pb, c));
  } else {
    try {
      int8Gemm(s, qa, f8, pa, qb, f8, pb, c);
      FAIL() << "8 x 8 bits accepted without VNNI";
    } catch (const KernelError& error) {
      EXPECT_NE(std::string(error.what()).find("VNNI"), std::string::npos) << error.what();
    }
  }
  GemmFormats exact = defaultGemmFormats(8, Rounding::kNearest, Rounding::kNearest, GemmSide::kRhs);
  EXPECT_NO_THROW(int8Gemm(s, qa, exact.lhs, pa, qb, exact.rhs, pb, c));
}

struct QuantizedOperands {
  std::vector<uint8_t> qa;
  std::vector<int8_t> qb;
  std::vector<float> pa, pb;
};

QuantizedOperands quantizeBoth(const GemmShape& s, const std::vector<float>& a,
                               const std::vector<float>& b, const QuantFormat& fa,
                               const QuantFormat& fb) {
  QuantizedOperands q;
  q.qa.resize(a.size());
  q.qb.resize(b.size());
  q.pa.resize(quantParamCount(lhsView(s), fa));
  q.pb.resize(quantParamCount(rhsView(s), fb));
  computeQuantParams(a, lhsView(s), fa, q.pa);
  computeQuantParams(b, rhsView(s), fb, q.pb);
  quantize(a, lhsView(s), fa, q.pa, q.qa, {1, 0});
  quantize(b, rhsView(s), fb, q.pb, q.qb, {2, 0});
  return q;
}

// int8Gemm computes the product of the dequantized operands: scales, zero points and
// per-block segments are all applied correctly (f32 rounding is the only difference).
TEST(Int8Gemm, EqualsTheProductOfDequantizedOperands) {
  const std::vector<std::pair<const char*, const char*>> pairs = {
      {"int8:channel:rtn", "int7:channel:sr"},
      {"int7:tensor:rtn", "int8:tensor:rtn"},
      {"int8:block32:rtn", "int7:block32:rtn"},
      {"int8:block16:rtn:asym", "int7:block24:sr"},
      {"int8:channel:sr:asym", "int7:tensor:rtn:asym"},
      {"int4:channel:rtn", "int4:block8:rtn:clip=mse"},
  };
  for (GemmShape s : {GemmShape{1, 40, 24, 100}, GemmShape{2, 17, 33, 64}}) {
    for (int t = 0; t < 4; ++t) {
      s.trans_a = t & 1;
      s.trans_b = t & 2;
      std::vector<float> a = qtest::normalData(s.sizeA(), 7);
      std::vector<float> b = qtest::normalData(s.sizeB(), 8, 0.1f);
      for (auto [lhs, rhs] : pairs) {
        QuantFormat fa = QuantFormat::parse(lhs), fb = QuantFormat::parse(rhs);
        QuantizedOperands q = quantizeBoth(s, a, b, fa, fb);
        std::vector<float> da(a.size()), db(b.size());
        dequantize(q.qa, lhsView(s), fa, q.pa, da);
        dequantize(q.qb, rhsView(s), fb, q.pb, db);
        std::vector<double> ref = qtest::referenceGemmF64(s, da, db);
        std::vector<float> c(s.sizeC());
        int8Gemm(s, q.qa, fa, q.pa, q.qb, fb, q.pb, c);
        double err = 0.0, norm = 0.0;
        for (size_t i = 0; i < ref.size(); ++i) {
          err = std::max(err, std::fabs(c[i] - ref[i]));
          norm = std::max(norm, std::fabs(ref[i]));
        }
        EXPECT_LE(err, 1e-5 * norm) << lhs << " x " << rhs << " ta=" << s.trans_a
                                    << " tb=" << s.trans_b << " batch=" << s.batch;
      }
    }
  }
}

// For C = A B with independent zero-mean data and independent quantization errors,
// C_q - C ~ eA B + A eB, whose energy relative to C is 1/SQNR_A + 1/SQNR_B (the eA eB
// term is smaller by another factor SQNR). The measured relative error energy must be
// within 15% of that prediction (measured: 0.98-1.04) (the data is iid, so the approximation is
// good; 4096 outputs average out the fluctuations).
TEST(Int8Gemm, ErrorMatchesTheInputSqnr) {
  GemmShape s{1, 64, 64, 512};
  std::vector<float> a = qtest::normalData(s.sizeA(), 10);
  std::vector<float> b = qtest::normalData(s.sizeB(), 11, 0.05f);
  for (int64_t i = 0; i < s.sizeA(); i += 37) a[i] *= 8.0f;  // some outliers
  std::vector<float> c_f32(s.sizeC());
  gemmF32(s, a, b, c_f32);
  for (auto [lhs, rhs] : {std::pair{"int8:channel:rtn", "int7:channel:rtn"},
                          std::pair{"int7:channel:sr", "int8:channel:sr"},
                          std::pair{"int4:channel:rtn", "int4:channel:rtn"},
                          std::pair{"int6:block64:rtn:asym", "int5:tensor:sr"}}) {
    QuantFormat fa = QuantFormat::parse(lhs), fb = QuantFormat::parse(rhs);
    QuantizedOperands q = quantizeBoth(s, a, b, fa, fb);
    std::vector<float> c(s.sizeC());
    int8Gemm(s, q.qa, fa, q.pa, q.qb, fb, q.pb, c);
    double err = 0.0, energy = 0.0;
    for (size_t i = 0; i < c.size(); ++i) {
      err += (double(c[i]) - c_f32[i]) * (double(c[i]) - c_f32[i]);
      energy += double(c_f32[i]) * c_f32[i];
    }
    const double sqnr_a = quantStats(a, lhsView(s), fa, {1, 0}).sqnr;
    const double sqnr_b = quantStats(b, rhsView(s), fb, {2, 0}).sqnr;
    const double predicted = 1.0 / sqnr_a + 1.0 / sqnr_b;
    EXPECT_NEAR((err / energy) / predicted, 1.0, 0.15)
        << lhs << " x " << rhs << ": SQNR_A " << sqnr_a << " SQNR_B " << sqnr_b;
  }
}

TEST(Int8Gemm, RejectsBadArguments) {
  GemmShape s{1, 4, 5, 6};
  QuantFormat fa = perChannelFormat(8), fb = perChannelFormat(7);
  std::vector<uint8_t> qa(24, 128);
  std::vector<int8_t> qb(30, 0);
  std::vector<float> pa(4, 1.0f), pb(5, 1.0f), c(20);
  EXPECT_NO_THROW(int8Gemm(s, qa, fa, pa, qb, fb, pb, c));
  EXPECT_THROW(int8Gemm(GemmShape{1, 4, 5, 0}, qa, fa, pa, qb, fb, pb, c), KernelError);
  EXPECT_THROW(int8Gemm(s, std::span<const uint8_t>(qa.data(), 23), fa, pa, qb, fb, pb, c),
               KernelError);
  EXPECT_THROW(int8Gemm(s, qa, fa, pa, std::span<const int8_t>(qb.data(), 29), fb, pb, c),
               KernelError);
  EXPECT_THROW(int8Gemm(s, qa, fa, pa, qb, fb, pb, std::span<float>(c.data(), 21)), KernelError);
  EXPECT_THROW(int8Gemm(s, qa, fa, std::span<const float>(pa.data(), 3), qb, fb, pb, c),
               KernelError);
  EXPECT_THROW(int8Gemm(s, qa, perTensorFormat(8), pa, qb, fb, pb, c), KernelError);
  EXPECT_THROW(int8Gemm(s, qa, perChannelFormat(9), pa, qb, fb, pb, c), KernelError);
  std::vector<float> bad = pb;
  bad[2] = -1.0f;
  EXPECT_THROW(int8Gemm(s, qa, fa, pa, qb, fb, bad, c), KernelError);
  GemmShape deep{1, 1, 1, kMaxInt8GemmK + 1};
  std::vector<uint8_t> qa_deep(deep.sizeA());
  std::vector<int8_t> qb_deep(deep.sizeB());
  std::vector<float> one(1, 1.0f), c1(1);
  EXPECT_THROW(int8Gemm(deep, qa_deep, fa, one, qb_deep, fb, one, c1), KernelError);
}

}  // namespace
}  // namespace pgq::kernels
