#include "kernels/smooth_quant.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/gemm.h"
#include "kernels/kernel_error.h"
#include "kernels/quantize.h"
#include "quant_test_util.h"

namespace pgq::kernels {
namespace {

TEST(SmoothQuant, FactorsFollowTheFormula) {
  // A [M=2, K=3], B [K=3, N=2].
  GemmShape s{1, 2, 2, 3};
  std::vector<float> a = {1.0f,  -4.0f, 0.0f,  //
                          -2.0f, 1.0f,  0.0f};
  std::vector<float> b = {0.5f, -0.25f,  //
                          2.0f, 1.0f,    //
                          3.0f, 1.0f};
  std::vector<float> factors(3);
  smoothQuantFactors(a, lhsView(s), b, rhsView(s), 0.5f, factors);
  EXPECT_FLOAT_EQ(factors[0], std::sqrt(2.0f) / std::sqrt(0.5f));  // max|A_0| = 2, max|B_0| = 0.5
  EXPECT_FLOAT_EQ(factors[1], std::sqrt(4.0f) / std::sqrt(2.0f));
  EXPECT_EQ(factors[2], 1.0f);  // A's channel 2 is all zero: nothing to migrate
  smoothQuantFactors(a, lhsView(s), b, rhsView(s), 1.0f, factors);
  EXPECT_FLOAT_EQ(factors[0], 2.0f);  // alpha = 1: all difficulty moves to the weight
  smoothQuantFactors(a, lhsView(s), b, rhsView(s), 0.0f, factors);
  EXPECT_FLOAT_EQ(factors[1], 0.5f);  // alpha = 0: s = 1 / max|B|
}

TEST(SmoothQuant, PreservesTheProductForEveryLayout) {
  for (GemmShape s : {GemmShape{1, 24, 16, 40}, GemmShape{2, 8, 12, 20, true, true}}) {
    std::vector<float> a = qtest::normalData(s.sizeA(), 1), b = qtest::normalData(s.sizeB(), 2);
    a[7] = 0.0f;
    std::vector<float> factors(s.k), a2(a.size()), b2(b.size());
    smoothQuantFactors(a, lhsView(s), b, rhsView(s), 0.5f, factors);
    // Non-finite values are ignored by the maxima.
    std::vector<float> a_nan = a, with_nan(s.k);
    a_nan[7] = NAN;
    smoothQuantFactors(a_nan, lhsView(s), b, rhsView(s), 0.5f, with_nan);
    EXPECT_EQ(with_nan, factors);
    applySmoothQuant(a, lhsView(s), b, rhsView(s), factors, a2, b2);
    std::vector<double> ref = qtest::referenceGemmF64(s, a, b);
    std::vector<double> got = qtest::referenceGemmF64(s, a2, b2);
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_NEAR(got[i], ref[i], 1e-5 * (1 + std::fabs(ref[i])));
  }
}

// Relative error energy of the int8 GEMM (lhs int8, rhs int7, per channel) against f32.
double int8GemmError(const GemmShape& s, const std::vector<float>& a, const std::vector<float>& b) {
  GemmFormats f = defaultGemmFormats(8, Rounding::kNearest, Rounding::kNearest, GemmSide::kRhs);
  std::vector<float> pa(quantParamCount(lhsView(s), f.lhs)), pb(quantParamCount(rhsView(s), f.rhs));
  std::vector<uint8_t> qa(a.size());
  std::vector<int8_t> qb(b.size());
  computeQuantParams(a, lhsView(s), f.lhs, pa);
  computeQuantParams(b, rhsView(s), f.rhs, pb);
  quantize(a, lhsView(s), f.lhs, pa, qa);
  quantize(b, rhsView(s), f.rhs, pb, qb);
  std::vector<float> c(s.sizeC()), ref(s.sizeC());
  int8Gemm(s, qa, f.lhs, pa, qb, f.rhs, pb, c);
  gemmF32(s, a, b, ref);
  double err = 0.0, energy = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    err += (double(c[i]) - ref[i]) * (double(c[i]) - ref[i]);
    energy += double(ref[i]) * ref[i];
  }
  return err / energy;
}

// An activation with outlier channels (the case SmoothQuant is for): per-token scales
// are set by the outliers and the other channels lose most of their bits. Smoothing
// moves the outliers into the weight and cuts the int8 GEMM's error several-fold.
TEST(SmoothQuant, MovesOutliersFromActivationToWeight) {
  GemmShape s{1, 256, 64, 128};
  std::vector<float> a = qtest::normalData(s.sizeA(), 3);
  std::vector<float> b = qtest::normalData(s.sizeB(), 4, 0.05f);
  for (int64_t m = 0; m < s.m; ++m)
    for (int64_t k : {5, 77}) a[m * s.k + k] *= 50.0f;
  std::vector<float> factors(s.k), a2(a.size()), b2(b.size());
  smoothQuantFactors(a, lhsView(s), b, rhsView(s), 0.5f, factors);
  applySmoothQuant(a, lhsView(s), b, rhsView(s), factors, a2, b2);
  EXPECT_LT(int8GemmError(s, a2, b2), 0.25 * int8GemmError(s, a, b));
}

TEST(SmoothQuant, RejectsBadArguments) {
  GemmShape s{1, 2, 2, 3};
  std::vector<float> a(6, 1.0f), b(6, 1.0f), f(3), a2(6), b2(6);
  EXPECT_THROW(smoothQuantFactors(a, lhsView(s), b, rhsView(s), 1.5f, f), KernelError);
  EXPECT_THROW(smoothQuantFactors(a, lhsView(s), b, OperandView{1, 2, 3, false}, 0.5f, f),
               KernelError);
  EXPECT_THROW(
      smoothQuantFactors(a, lhsView(s), b, rhsView(s), 0.5f, std::span<float>(f.data(), 2)),
      KernelError);
  std::vector<float> zero_factor = {1.0f, 0.0f, 1.0f};
  EXPECT_THROW(applySmoothQuant(a, lhsView(s), b, rhsView(s), zero_factor, a2, b2), KernelError);
  EXPECT_THROW(
      applySmoothQuant(a, lhsView(s), b, rhsView(s), f, std::span<float>(a2.data(), 5), b2),
      KernelError);
}

}  // namespace
}  // namespace pgq::kernels
