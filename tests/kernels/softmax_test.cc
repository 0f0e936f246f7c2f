#include "kernels/softmax.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu_isa.h"
#include "kernels/kernel_error.h"
#include "tests/kernels/f32_test_util.h"
#include "tests/kernels/wide_paths.h"

namespace pgq::kernels {
namespace {

using testing::Guarded;
using testing::kThreadCounts;
using testing::maxRelError;
using testing::randomVector;
using testing::relL2Error;
using testing::ThreadCount;

constexpr float kInf = std::numeric_limits<float>::infinity();

const std::pair<int64_t, int64_t> kShapes[] = {{1, 1}, {1, 7}, {3, 8}, {5, 100}, {2, 1031},
                                               {17, 1024}, {130, 128}, {64, 257}};

std::vector<double> toDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

std::vector<double> softmaxRef(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < cols; ++c) max = std::max(max, x[r * cols + c]);
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(x[r * cols + c] - max);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = std::exp(x[r * cols + c] - max) / sum;
  }
  return y;
}

double crossEntropyRef(const std::vector<double>& x, const std::vector<int32_t>& t, int64_t rows, int64_t cols) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < cols; ++c) max = std::max(max, x[r * cols + c]);
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(x[r * cols + c] - max);
    total += max + std::log(sum) - x[r * cols + t[static_cast<size_t>(r)]];
  }
  return total / rows;
}

std::vector<int32_t> randomTargets(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(cols - 1));
  std::vector<int32_t> t(static_cast<size_t>(rows));
  for (int32_t& v : t) v = dist(gen);
  return t;
}

TEST(SoftmaxTest, ForwardMatchesF64Reference) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (auto [rows, cols] : kShapes) {
      // Large logits check the max subtraction (exp(90) overflows f32).
      for (float offset : {0.0f, 90.0f}) {
        std::vector<float> x = randomVector(rows * cols, 31, -8.0f + offset, 8.0f + offset);
        Guarded y(rows * cols);
        softmax(x.data(), y.data(), rows, cols);
        const std::vector<double> ref = softmaxRef(toDouble(x), rows, cols);
        EXPECT_LE(maxRelError(y.data(), ref, 0.0), 1e-6) << rows << "x" << cols;
        EXPECT_TRUE(y.guardsIntact());
        softmax(x.data(), x.data(), rows, cols);
        EXPECT_TRUE(testing::bitwiseEqual(x, y.values())) << "in place";
      }
    }
  }
}

TEST(SoftmaxTest, MaskedEntriesAndFullyMaskedRows) {
  // Row 0: partly -inf; row 1: all -inf (defined as zeros); row 2: one +inf -> NaN like torch.
  const int64_t cols = 11;
  std::vector<float> x = randomVector(3 * cols, 32);
  for (int64_t c = 4; c < cols; ++c) x[static_cast<size_t>(c)] = -kInf;
  for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(cols + c)] = -kInf;
  x[2 * cols + 3] = kInf;
  std::vector<float> y(x.size());
  softmax(x.data(), y.data(), 3, cols);
  double sum = 0.0;
  for (int64_t c = 0; c < cols; ++c) sum += y[static_cast<size_t>(c)];
  EXPECT_NEAR(sum, 1.0, 1e-6);
  for (int64_t c = 4; c < cols; ++c) EXPECT_EQ(y[static_cast<size_t>(c)], 0.0f);
  for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(y[static_cast<size_t>(cols + c)], 0.0f);
  EXPECT_TRUE(std::isnan(y[2 * cols + 3]));
}

TEST(SoftmaxTest, GradMatchesF64FormulaAndFiniteDifferences) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (auto [rows, cols] : kShapes) {
      const std::vector<float> x = randomVector(rows * cols, 33, -3.0f, 3.0f);
      std::vector<float> y(x.size());
      softmax(x.data(), y.data(), rows, cols);
      const std::vector<float> dy = randomVector(rows * cols, 34);
      Guarded dx(rows * cols);
      softmaxGrad(y.data(), dy.data(), dx.data(), rows, cols);
      std::vector<double> ref(x.size());
      for (int64_t r = 0; r < rows; ++r) {
        double dot = 0.0;
        for (int64_t c = 0; c < cols; ++c) dot += static_cast<double>(dy[r * cols + c]) * y[r * cols + c];
        for (int64_t c = 0; c < cols; ++c)
          ref[r * cols + c] = static_cast<double>(y[r * cols + c]) * (dy[r * cols + c] - dot);
      }
      if (cols > 1) {  // a one-column softmax has an exactly zero gradient
        EXPECT_LE(relL2Error(toDouble(dx.values()), ref), 1e-6) << rows << "x" << cols;
      }
      EXPECT_TRUE(dx.guardsIntact());
    }
  }
  // The formula is the derivative of the forward function: central differences of
  // sum(dy * softmaxRef(x)) in f64.
  const int64_t rows = 3, cols = 37;
  const std::vector<float> x = randomVector(rows * cols, 35, -3.0f, 3.0f);
  const std::vector<float> dy = randomVector(rows * cols, 36);
  std::vector<float> y(x.size()), dx(x.size());
  softmax(x.data(), y.data(), rows, cols);
  softmaxGrad(y.data(), dy.data(), dx.data(), rows, cols);
  std::vector<double> xd = toDouble(x), fd(x.size());
  auto loss = [&] {
    const std::vector<double> yy = softmaxRef(xd, rows, cols);
    double l = 0.0;
    for (size_t i = 0; i < yy.size(); ++i) l += dy[i] * yy[i];
    return l;
  };
  for (size_t i = 0; i < xd.size(); ++i) {
    const double saved = xd[i];
    xd[i] = saved + 1e-6;
    const double lp = loss();
    xd[i] = saved - 1e-6;
    const double lm = loss();
    xd[i] = saved;
    fd[i] = (lp - lm) / 2e-6;
  }
  EXPECT_LE(relL2Error(toDouble(dx), fd), 1e-5);
}

TEST(CausalMaskTest, MasksFutureKeys) {
  const float kValue = -1e9f;
  // tq == tk (training), tq < tk (queries aligned to the last keys), tq > tk (leading
  // queries see nothing), sizes around the threshold.
  const int64_t shapes[][3] = {{1, 1, 1}, {2, 5, 5}, {3, 4, 9}, {1, 6, 3}, {64, 16, 17}, {2, 128, 128}};
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (const auto& s : shapes) {
      const int64_t batch = s[0], tq = s[1], tk = s[2];
      const std::vector<float> x = randomVector(batch * tq * tk, 37);
      Guarded y(batch * tq * tk);
      causalMask(x.data(), y.data(), batch, tq, tk, kValue);
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < tq; ++i)
          for (int64_t j = 0; j < tk; ++j) {
            const int64_t at = (b * tq + i) * tk + j;
            ASSERT_EQ(y[at], j > i + (tk - tq) ? kValue : x[static_cast<size_t>(at)])
                << b << "," << i << "," << j << " of " << tq << "x" << tk;
          }
      EXPECT_TRUE(y.guardsIntact());
      std::vector<float> z = x;
      causalMask(z.data(), z.data(), batch, tq, tk, kValue);
      EXPECT_TRUE(testing::bitwiseEqual(z, y.values())) << "in place";
    }
  }
}

// softmax with a prologue (fuse_softmax's scale and causal mask) must give, element for
// element, what the separate kernels give: x * scale in f32, the mask, the softmax; and
// backward softmaxGrad, the mask with 0, then * scale. Ragged rows, tq < tk and tq > tk,
// a negative scale, both fills, in place and not, on 1 and 2 threads.
TEST(SoftmaxTest, PrologueGivesTheSeparateKernelsResultsBitForBit) {
  const int64_t shapes[][3] = {{1, 1, 1}, {2, 5, 5}, {3, 4, 9}, {1, 6, 3}, {4, 16, 17}, {2, 37, 37}, {2, 64, 300}};
  const testing::WidePaths wide_paths;
  int64_t compared = 0;
  for (int threads : kThreadCounts)
  for (bool wide : {false, true}) {  // the 256-bit path, and the 512-bit one where the CPU has it
    if (wide && !wide_paths.available()) continue;
    setAvx512Kernels(wide);
    ThreadCount tc(threads);
    for (const auto& s : shapes) {
      const int64_t batch = s[0], tq = s[1], tk = s[2], rows = batch * tq, n = rows * tk;
      const std::vector<float> x = randomVector(n, 61, -8.0f, 8.0f), dy = randomVector(n, 62);
      for (float scale : {1.0f, 0.125f, static_cast<float>(1.0 / std::sqrt(3.0)), -0.5f})
        for (bool causal : {false, true})
          for (float fill : {-kInf, -1e9f}) {
            if (!causal && fill != -kInf) continue;
            SCOPED_TRACE(::testing::Message() << batch << "x" << tq << "x" << tk << " scale " << scale
                                              << " causal " << causal << " fill " << fill << ", " << threads
                                              << " threads, wide " << wide);
            const SoftmaxPrologue p{.scale = scale, .causal = causal, .fill = fill, .tq = tq};
            std::vector<float> t(x.size()), want(x.size());
            for (size_t i = 0; i < x.size(); ++i) t[i] = x[i] * scale;
            if (causal) causalMask(t.data(), t.data(), batch, tq, tk, fill);
            softmax(t.data(), want.data(), rows, tk);
            Guarded got(n);
            softmax(x.data(), got.data(), rows, tk, p);
            EXPECT_TRUE(got.guardsIntact());
            ASSERT_TRUE(testing::bitwiseEqual(got.values(), want)) << "forward";
            std::vector<float> in_place = x;
            softmax(in_place.data(), in_place.data(), rows, tk, p);
            ASSERT_TRUE(testing::bitwiseEqual(in_place, want)) << "forward in place";

            std::vector<float> g(x.size());
            softmaxGrad(want.data(), dy.data(), g.data(), rows, tk);
            if (causal) causalMask(g.data(), g.data(), batch, tq, tk, 0.0f);
            for (float& v : g) v *= scale;
            Guarded dx(n);
            softmaxGrad(want.data(), dy.data(), dx.data(), rows, tk, p);
            EXPECT_TRUE(dx.guardsIntact());
            ASSERT_TRUE(testing::bitwiseEqual(dx.values(), g)) << "backward";
            std::vector<float> over_dy = dy;
            softmaxGrad(want.data(), over_dy.data(), over_dy.data(), rows, tk, p);
            ASSERT_TRUE(testing::bitwiseEqual(over_dy, g)) << "backward over dy";
            ++compared;
          }
    }
  }
  EXPECT_EQ(compared, (wide_paths.available() ? 2 : 1) * 2 * 7 * 4 * 3);
  setAvx512Kernels(true);
  // A NaN score turns its row into NaN, masked keys included, as the separate kernels do
  // (the NaN's sign and payload may differ: maxps drops a NaN depending on where it is).
  {
    const int64_t batch = 2, tq = 40, tk = 40, rows = batch * tq, n = rows * tk;
    std::vector<float> x = randomVector(n, 63, -8.0f, 8.0f);
    x[static_cast<size_t>(5 * tk + 2)] = std::numeric_limits<float>::quiet_NaN();   // row 5 keeps 6 keys
    x[static_cast<size_t>(45 * tk + 3)] = std::numeric_limits<float>::quiet_NaN();  // row 45 keeps 6
    x[static_cast<size_t>(7 * tk + 30)] = std::numeric_limits<float>::quiet_NaN();  // row 7: masked, no effect
    std::vector<float> t(x.size()), want(x.size()), got(x.size());
    for (size_t i = 0; i < x.size(); ++i) t[i] = x[i] * 0.25f;
    causalMask(t.data(), t.data(), batch, tq, tk, -kInf);
    softmax(t.data(), want.data(), rows, tk);
    softmax(x.data(), got.data(), rows, tk, {.scale = 0.25f, .causal = true, .fill = -kInf, .tq = tq});
    int nans = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(std::isnan(got[i]), std::isnan(want[i])) << i;
      if (std::isnan(want[i])) ++nans;
      else ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << i;
    }
    EXPECT_EQ(nans, 2 * tk);
  }
  // The causal rows must be whole [tq, cols] matrices.
  std::vector<float> v(6 * 4);
  EXPECT_THROW(softmax(v.data(), v.data(), 6, 4, {.causal = true, .tq = 4}), KernelError);
  EXPECT_THROW(softmaxGrad(v.data(), v.data(), v.data(), 6, 4, {.causal = true, .tq = 0}), KernelError);
}

TEST(CrossEntropyTest, LossMatchesF64Reference) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (auto [rows, cols] : kShapes) {
      const std::vector<float> x = randomVector(rows * cols, 38, -6.0f, 6.0f);
      const std::vector<int32_t> t = randomTargets(rows, cols, 39);
      const float loss = crossEntropy(x.data(), t.data(), rows, cols);
      const double ref = crossEntropyRef(toDouble(x), t, rows, cols);
      // One-column rows have a loss of exactly 0.
      EXPECT_NEAR(loss, ref, 2e-7 * std::abs(ref) + 1e-7) << rows << "x" << cols;
    }
  }
}

TEST(CrossEntropyTest, GradMatchesF64FormulaAndFiniteDifferences) {
  const float dloss = 0.75f;
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (auto [rows, cols] : kShapes) {
      const std::vector<float> x = randomVector(rows * cols, 40, -6.0f, 6.0f);
      const std::vector<int32_t> t = randomTargets(rows, cols, 41);
      Guarded g(rows * cols);
      crossEntropyGrad(x.data(), t.data(), dloss, g.data(), rows, cols);
      std::vector<double> ref = softmaxRef(toDouble(x), rows, cols);
      for (int64_t r = 0; r < rows; ++r) ref[r * cols + t[static_cast<size_t>(r)]] -= 1.0;
      for (double& v : ref) v *= static_cast<double>(dloss) / rows;
      // Elementwise relative to the largest gradient entry (the target's entry).
      double max_ref = 0.0;
      for (double v : ref) max_ref = std::max(max_ref, std::abs(v));
      EXPECT_LE(maxRelError(g.data(), ref, max_ref + 1e-30), 1e-6) << rows << "x" << cols;
      EXPECT_TRUE(g.guardsIntact());
    }
  }
  const int64_t rows = 4, cols = 29;
  const std::vector<float> x = randomVector(rows * cols, 42, -3.0f, 3.0f);
  const std::vector<int32_t> t = randomTargets(rows, cols, 43);
  std::vector<float> g(x.size());
  crossEntropyGrad(x.data(), t.data(), 1.0f, g.data(), rows, cols);
  std::vector<double> xd = toDouble(x), fd(x.size());
  for (size_t i = 0; i < xd.size(); ++i) {
    const double saved = xd[i];
    xd[i] = saved + 1e-6;
    const double lp = crossEntropyRef(xd, t, rows, cols);
    xd[i] = saved - 1e-6;
    const double lm = crossEntropyRef(xd, t, rows, cols);
    xd[i] = saved;
    fd[i] = (lp - lm) / 2e-6;
  }
  EXPECT_LE(relL2Error(toDouble(g), fd), 1e-5);
}

TEST(CrossEntropyTest, OutOfRangeTargetsThrow) {
  const std::vector<float> x = randomVector(3 * 5, 44);
  std::vector<float> g(x.size());
  for (int32_t bad : {-1, 5, 1000}) {
    const std::vector<int32_t> t = {0, bad, 4};
    EXPECT_THROW(crossEntropy(x.data(), t.data(), 3, 5), KernelError) << bad;
    EXPECT_THROW(crossEntropyGrad(x.data(), t.data(), 1.0f, g.data(), 3, 5), KernelError) << bad;
  }
  const std::vector<int32_t> ok = {0, 0, 4};
  EXPECT_NO_THROW(crossEntropy(x.data(), ok.data(), 3, 5));
}

TEST(SoftmaxFamilyTest, ResultsDoNotDependOnThreadCount) {
  const int64_t rows = 2048, cols = 256;
  const std::vector<float> x = randomVector(rows * cols, 45, -5.0f, 5.0f);
  const std::vector<int32_t> t = randomTargets(rows, cols, 46);
  std::vector<float> s1(x.size()), s2(x.size()), g1(x.size()), g2(x.size());
  float l1, l2;
  {
    ThreadCount tc(1);
    softmax(x.data(), s1.data(), rows, cols);
    l1 = crossEntropy(x.data(), t.data(), rows, cols);
    crossEntropyGrad(x.data(), t.data(), 1.0f, g1.data(), rows, cols);
  }
  {
    ThreadCount tc(2);
    softmax(x.data(), s2.data(), rows, cols);
    l2 = crossEntropy(x.data(), t.data(), rows, cols);
    crossEntropyGrad(x.data(), t.data(), 1.0f, g2.data(), rows, cols);
  }
  EXPECT_TRUE(testing::bitwiseEqual(s1, s2));
  EXPECT_EQ(l1, l2);
  EXPECT_TRUE(testing::bitwiseEqual(g1, g2));
}

// Where the CPU has AVX-512, the exponentials and their row sums take 16 lanes at a time
// (softmax.cc, expShiftSumAvx512): softmax, the loss and its gradient must be those of
// the 256-bit path bit for bit, for rows shorter than a vector, ragged blocks, several
// blocks, masked (-inf) and underflowing entries, huge logits and a NaN. On a CPU
// without AVX-512 the switch must stay off.
TEST(SoftmaxFamilyTest, WidePathGivesTheResultsOfThe256BitPath) {
  const testing::WidePaths wide_paths;
  if (!wide_paths.available()) return;  // the 256-bit path is the only one here
  int64_t compared = 0;
  for (int64_t cols : {1, 7, 8, 31, 32, 33, 100, 512, 513, 1031, 50257}) {
    const int64_t rows = 5;
    std::vector<float> x = randomVector(rows * cols, 50 + static_cast<uint32_t>(cols), -20.0f, 20.0f);
    for (int64_t i = 0; i < rows * cols; i += 11) x[static_cast<size_t>(i)] = -kInf;       // masked
    for (int64_t i = 5; i < rows * cols; i += 13) x[static_cast<size_t>(i)] = -150.0f;    // exp underflows
    x[static_cast<size_t>(cols - 1)] = 80.0f;  // row 0: a huge logit
    for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(2 * cols + c)] = -kInf;  // row 2 fully masked
    x[static_cast<size_t>(3 * cols + cols / 2)] = std::numeric_limits<float>::quiet_NaN();  // row 3
    std::vector<int32_t> t = randomTargets(rows, cols, 7);
    t[2] = 0;
    auto run = [&](bool wide) {
      setAvx512Kernels(wide);
      std::vector<float> s(x.size()), g(x.size());
      softmax(x.data(), s.data(), rows, cols);
      // The loss over the rows without NaN or full masks, and the gradient of all.
      const float loss = crossEntropy(x.data(), t.data(), 2, cols);
      crossEntropyGrad(x.data(), t.data(), 0.5f, g.data(), rows, cols);
      return std::make_tuple(s, loss, g);
    };
    const auto [s_wide, l_wide, g_wide] = run(true);
    const auto [s_narrow, l_narrow, g_narrow] = run(false);
    EXPECT_TRUE(testing::bitwiseEqual(s_wide, s_narrow)) << "softmax, cols " << cols;
    EXPECT_EQ(std::memcmp(&l_wide, &l_narrow, sizeof(float)), 0) << "loss, cols " << cols;
    EXPECT_TRUE(testing::bitwiseEqual(g_wide, g_narrow)) << "gradient, cols " << cols;
    ++compared;
  }
  EXPECT_EQ(compared, 11);
}

}  // namespace
}  // namespace pgq::kernels
