#include "kernels/smooth_quant.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/kernel_error.h"
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

TEST(SmoothQuant, IgnoresNonFiniteValues) {
  for (GemmShape s : {GemmShape{1, 24, 16, 40}, GemmShape{2, 8, 12, 20, true, true}}) {
    std::vector<float> a = qtest::normalData(s.sizeA(), 1), b = qtest::normalData(s.sizeB(), 2);
    a[7] = 0.0f;
    std::vector<float> factors(s.k);
    smoothQuantFactors(a, lhsView(s), b, rhsView(s), 0.5f, factors);
    std::vector<float> a_nan = a, with_nan(s.k);
    a_nan[7] = NAN;
    smoothQuantFactors(a_nan, lhsView(s), b, rhsView(s), 0.5f, with_nan);
    EXPECT_EQ(with_nan, factors);
  }
}

TEST(SmoothQuant, RejectsBadArguments) {
  GemmShape s{1, 2, 2, 3};
  std::vector<float> a(6, 1.0f), b(6, 1.0f), f(3);
  EXPECT_THROW(smoothQuantFactors(a, lhsView(s), b, rhsView(s), 1.5f, f), KernelError);
  EXPECT_THROW(smoothQuantFactors(a, lhsView(s), b, OperandView{1, 2, 3, false}, 0.5f, f),
               KernelError);
  EXPECT_THROW(
      smoothQuantFactors(a, lhsView(s), b, rhsView(s), 0.5f, std::span<float>(f.data(), 2)),
      KernelError);
}

}  // namespace
}  // namespace pgq::kernels
