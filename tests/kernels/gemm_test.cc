#include "kernels/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "kernels/convert.h"
#include "kernels/kernel_error.h"
#include "quant_test_util.h"

namespace pgq::kernels {
namespace {

// Max |c - ref| over the f32 accumulation bound K * eps * sum_k |a||b| (per element).
void expectCloseToReference(const GemmShape& s, const std::vector<float>& a,
                            const std::vector<float>& b, const std::vector<float>& c) {
  std::vector<double> ref = qtest::referenceGemmF64(s, a, b);
  std::vector<float> abs_a(a.size()), abs_b(b.size());
  for (size_t i = 0; i < a.size(); ++i) abs_a[i] = std::fabs(a[i]);
  for (size_t i = 0; i < b.size(); ++i) abs_b[i] = std::fabs(b[i]);
  std::vector<double> mag = qtest::referenceGemmF64(s, abs_a, abs_b);
  const double eps = std::numeric_limits<float>::epsilon();
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_LE(std::fabs(c[i] - ref[i]), 2.0 * double(s.k) * eps * mag[i] + 1e-30)
        << "element " << i << " of shape b=" << s.batch << " m=" << s.m << " n=" << s.n
        << " k=" << s.k << " ta=" << s.trans_a << " tb=" << s.trans_b;
  }
}

TEST(GemmF32, MatchesDoubleReferenceForEveryTransposeAndBatch) {
  for (GemmShape s : {GemmShape{1, 37, 29, 53}, GemmShape{3, 16, 40, 24}, GemmShape{1, 1, 1, 1},
                      GemmShape{2, 64, 8, 130}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        s.trans_a = ta;
        s.trans_b = tb;
        std::vector<float> a = qtest::normalData(s.sizeA(), 1);
        std::vector<float> b = qtest::normalData(s.sizeB(), 2);
        std::vector<float> c(s.sizeC(), NAN);
        gemmF32(s, a, b, c);
        expectCloseToReference(s, a, b, c);
      }
    }
  }
}

// Native bf16: the same products as the widened f32 GEMM (bf16 x bf16 is exact in f32),
// summed in another order: within the f32 accumulation bound of the exact result of the
// rounded operands. Without bf16 dot products it refuses rather than run oneDNN's slow
// reference kernel (the backend widens to f32 then).
TEST(GemmBf16, MatchesTheRoundedOperandsProductOrRefuses) {
  for (GemmShape s : {GemmShape{1, 37, 29, 53}, GemmShape{3, 16, 40, 24}, GemmShape{1, 64, 300, 130}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        s.trans_a = ta;
        s.trans_b = tb;
        std::vector<float> a = qtest::normalData(s.sizeA(), 7), b = qtest::normalData(s.sizeB(), 8);
        std::vector<uint16_t> a16(a.size()), b16(b.size());
        f32ToBf16(a.data(), a16.data(), static_cast<int64_t>(a.size()));
        f32ToBf16(b.data(), b16.data(), static_cast<int64_t>(b.size()));
        std::vector<float> c(s.sizeC(), NAN);
        if (!hasBf16Gemm()) {
          EXPECT_THROW(gemmBf16(s, a16, b16, c), KernelError);
          continue;
        }
        gemmBf16(s, a16, b16, c);
        bf16ToF32(a16.data(), a.data(), static_cast<int64_t>(a.size()));  // the values it multiplied
        bf16ToF32(b16.data(), b.data(), static_cast<int64_t>(b.size()));
        expectCloseToReference(s, a, b, c);
      }
    }
  }
}

TEST(GemmF32, ConcurrentCallersShareTheCache) {
  GemmShape s1{1, 48, 32, 64, false, true};
  GemmShape s2{2, 20, 36, 28, true, false};
  std::vector<float> a1 = qtest::normalData(s1.sizeA(), 3), b1 = qtest::normalData(s1.sizeB(), 4);
  std::vector<float> a2 = qtest::normalData(s2.sizeA(), 5), b2 = qtest::normalData(s2.sizeB(), 6);
  std::vector<float> c1(s1.sizeC()), c2(s2.sizeC()), r1(s1.sizeC()), r2(s2.sizeC());
  gemmF32(s1, a1, b1, r1);
  gemmF32(s2, a2, b2, r2);
  auto worker = [](const GemmShape& s, const std::vector<float>& a, const std::vector<float>& b,
                   std::vector<float>& c) {
    for (int i = 0; i < 20; ++i) gemmF32(s, a, b, c);
  };
  std::thread t1(worker, std::cref(s1), std::cref(a1), std::cref(b1), std::ref(c1));
  std::thread t2(worker, std::cref(s2), std::cref(a2), std::cref(b2), std::ref(c2));
  t1.join();
  t2.join();
  EXPECT_EQ(c1, r1);
  EXPECT_EQ(c2, r2);
}

TEST(GemmF32, RejectsBadShapesAndBuffers) {
  GemmShape s{1, 4, 5, 6};
  std::vector<float> a(24), b(30), c(20);
  EXPECT_NO_THROW(gemmF32(s, a, b, c));
  EXPECT_THROW(gemmF32(GemmShape{1, 0, 5, 6}, a, b, c), KernelError);
  EXPECT_THROW(gemmF32(GemmShape{0, 4, 5, 6}, a, b, c), KernelError);
  EXPECT_THROW(gemmF32(s, std::span<const float>(a.data(), 23), b, c), KernelError);
  EXPECT_THROW(gemmF32(s, a, std::span<const float>(b.data(), 31), c), KernelError);
  EXPECT_THROW(gemmF32(s, a, b, std::span<float>(c.data(), 19)), KernelError);
}

}  // namespace
}  // namespace pgq::kernels
