#include "kernels/norm.h"

#include <cmath>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernel_error.h"
#include "tests/kernels/f32_test_util.h"

namespace pgq::kernels {
namespace {

using testing::Guarded;
using testing::kThreadCounts;
using testing::maxRelError;
using testing::randomVector;
using testing::relL2Error;
using testing::ThreadCount;

constexpr float kEps = 1e-5f;

// rows x cols shapes: single rows and columns, vector tails, long rows, and sizes just
// above the parallel threshold (17 x 1024 = 17408 elements).
const std::pair<int64_t, int64_t> kShapes[] = {{1, 1}, {1, 7}, {3, 8}, {5, 100}, {2, 1031},
                                               {17, 1024}, {70, 256}, {129, 130}};

using Forward = std::function<std::vector<double>(const std::vector<double>&, int64_t, int64_t)>;

std::vector<double> rmsNormRef(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t c = 0; c < cols; ++c) ss += x[r * cols + c] * x[r * cols + c];
    const double inv = 1.0 / std::sqrt(ss / cols + kEps);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] * inv;
  }
  return y;
}

std::vector<double> layerNormRef(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0;
    for (int64_t c = 0; c < cols; ++c) mean += x[r * cols + c];
    mean /= cols;
    double var = 0.0;
    for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
    const double inv = 1.0 / std::sqrt(var / cols + kEps);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = (x[r * cols + c] - mean) * inv;
  }
  return y;
}

// Gradient of sum(dy * forward(x)) by central differences, in f64.
std::vector<double> finiteDifferenceGrad(const Forward& f, std::vector<double> x, const std::vector<double>& dy,
                                         int64_t rows, int64_t cols) {
  std::vector<double> grad(x.size());
  const double h = 1e-6;
  auto loss = [&](const std::vector<double>& xx) {
    const std::vector<double> y = f(xx, rows, cols);
    double l = 0.0;
    for (size_t i = 0; i < y.size(); ++i) l += dy[i] * y[i];
    return l;
  };
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double lp = loss(x);
    x[i] = saved - h;
    const double lm = loss(x);
    x[i] = saved;
    grad[i] = (lp - lm) / (2 * h);
  }
  return grad;
}

std::vector<double> toDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Analytic gradients in f64 (the formulas the kernels implement, derived separately
// from the finite-difference check below).
std::vector<double> rmsNormGradRef(const std::vector<double>& x, const std::vector<double>& dy, int64_t rows,
                                   int64_t cols) {
  std::vector<double> dx(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0, dot = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      ss += x[r * cols + c] * x[r * cols + c];
      dot += x[r * cols + c] * dy[r * cols + c];
    }
    const double inv = 1.0 / std::sqrt(ss / cols + kEps);
    for (int64_t c = 0; c < cols; ++c)
      dx[r * cols + c] = inv * dy[r * cols + c] - inv * inv * inv * x[r * cols + c] * dot / cols;
  }
  return dx;
}

std::vector<double> layerNormGradRef(const std::vector<double>& x, const std::vector<double>& dy, int64_t rows,
                                     int64_t cols) {
  std::vector<double> dx(x.size());
  const std::vector<double> xhat = layerNormRef(x, rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0, var = 0.0, mean_dy = 0.0, mean_dy_xhat = 0.0;
    for (int64_t c = 0; c < cols; ++c) mean += x[r * cols + c] / cols;
    for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean) / cols;
    for (int64_t c = 0; c < cols; ++c) {
      mean_dy += dy[r * cols + c] / cols;
      mean_dy_xhat += dy[r * cols + c] * xhat[r * cols + c] / cols;
    }
    const double inv = 1.0 / std::sqrt(var + kEps);
    for (int64_t c = 0; c < cols; ++c)
      dx[r * cols + c] = inv * (dy[r * cols + c] - mean_dy - xhat[r * cols + c] * mean_dy_xhat);
  }
  return dx;
}

using Kernel = void (*)(const float*, float*, int64_t, int64_t, float);
using GradKernel = void (*)(const float*, const float*, float*, int64_t, int64_t, float);

struct NormCase {
  const char* name;
  Kernel forward;
  GradKernel grad;
  Forward ref;
  std::vector<double> (*grad_ref)(const std::vector<double>&, const std::vector<double>&, int64_t, int64_t);
};

const NormCase kCases[] = {
    {"rmsNorm", rmsNorm, rmsNormGrad, rmsNormRef, rmsNormGradRef},
    {"layerNorm", layerNorm, layerNormGrad, layerNormRef, layerNormGradRef},
};

TEST(NormTest, ForwardMatchesF64Reference) {
  for (const NormCase& nc : kCases) {
    for (int threads : kThreadCounts) {
      ThreadCount tc(threads);
      for (auto [rows, cols] : kShapes) {
        // An offset mean checks that layerNorm's variance does not cancel.
        for (float offset : {0.0f, 50.0f}) {
          std::vector<float> x = randomVector(rows * cols, 21, -1.0f + offset, 1.0f + offset);
          Guarded y(rows * cols);
          nc.forward(x.data(), y.data(), rows, cols, kEps);
          const std::vector<double> ref = nc.ref(toDouble(x), rows, cols);
          // y is O(1): bound the error relative to 1 (layerNorm's mean is rounded to
          // f32 like torch's, which costs ulp(offset) / std absolute).
          const double bound = offset == 0.0f ? 1e-6 : 1e-5;
          EXPECT_LE(maxRelError(y.data(), ref, 1.0), bound) << nc.name << " " << rows << "x" << cols;
          EXPECT_TRUE(y.guardsIntact()) << nc.name;
          // In place gives the same values.
          nc.forward(x.data(), x.data(), rows, cols, kEps);
          EXPECT_TRUE(testing::bitwiseEqual(x, y.values())) << nc.name;
        }
      }
    }
  }
}

TEST(NormTest, GradMatchesF64Formula) {
  for (const NormCase& nc : kCases) {
    for (int threads : kThreadCounts) {
      ThreadCount tc(threads);
      for (auto [rows, cols] : kShapes) {
        const std::vector<float> x = randomVector(rows * cols, 22, -2.0f, 2.0f);
        const std::vector<float> dy = randomVector(rows * cols, 23);
        Guarded dx(rows * cols);
        nc.grad(x.data(), dy.data(), dx.data(), rows, cols, kEps);
        const std::vector<double> ref = nc.grad_ref(toDouble(x), toDouble(dy), rows, cols);
        if (cols > 1) {  // a 1-column layerNorm has an exactly zero gradient
          EXPECT_LE(relL2Error(toDouble(dx.values()), ref), 2e-6) << nc.name << " " << rows << "x" << cols;
        }
        double max_ref = 0.0;
        for (double v : ref) max_ref = std::max(max_ref, std::abs(v));
        for (int64_t i = 0; i < rows * cols; ++i)
          ASSERT_NEAR(dx[i], ref[static_cast<size_t>(i)], 1e-5 * max_ref + 1e-7) << nc.name << " at " << i;
        EXPECT_TRUE(dx.guardsIntact()) << nc.name;
      }
    }
  }
}

TEST(NormTest, GradMatchesFiniteDifferences) {
  for (const NormCase& nc : kCases) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 5}, {3, 37}, {2, 64}}) {
      const std::vector<float> x = randomVector(rows * cols, 24, -2.0f, 2.0f);
      const std::vector<float> dy = randomVector(rows * cols, 25);
      std::vector<float> dx(x.size());
      nc.grad(x.data(), dy.data(), dx.data(), rows, cols, kEps);
      // Against the f64 definition of the forward function...
      const std::vector<double> fd = finiteDifferenceGrad(nc.ref, toDouble(x), toDouble(dy), rows, cols);
      EXPECT_LE(relL2Error(toDouble(dx), fd), 1e-5) << nc.name;
      // ...and against the f32 forward kernel itself (step large enough for f32).
      std::vector<double> fd32(x.size());
      std::vector<float> xp(x), y(x.size());
      const float h = 1e-2f;
      auto loss = [&](const std::vector<float>& xx) {
        nc.forward(xx.data(), y.data(), rows, cols, kEps);
        double l = 0.0;
        for (size_t i = 0; i < y.size(); ++i) l += static_cast<double>(dy[i]) * y[i];
        return l;
      };
      for (size_t i = 0; i < x.size(); ++i) {
        xp[i] = x[i] + h;
        const double lp = loss(xp);
        xp[i] = x[i] - h;
        const double lm = loss(xp);
        xp[i] = x[i];
        fd32[i] = (lp - lm) / (2.0 * h);
      }
      EXPECT_LE(relL2Error(toDouble(dx), fd32), 2e-3) << nc.name;
    }
  }
}

TEST(NormTest, ResultsDoNotDependOnThreadCount) {
  const int64_t rows = 300, cols = 256;
  const std::vector<float> x = randomVector(rows * cols, 26);
  const std::vector<float> dy = randomVector(rows * cols, 27);
  for (const NormCase& nc : kCases) {
    std::vector<float> a(x.size()), b(x.size()), ga(x.size()), gb(x.size());
    {
      ThreadCount tc(1);
      nc.forward(x.data(), a.data(), rows, cols, kEps);
      nc.grad(x.data(), dy.data(), ga.data(), rows, cols, kEps);
    }
    {
      ThreadCount tc(2);
      nc.forward(x.data(), b.data(), rows, cols, kEps);
      nc.grad(x.data(), dy.data(), gb.data(), rows, cols, kEps);
    }
    EXPECT_TRUE(testing::bitwiseEqual(a, b)) << nc.name;
    EXPECT_TRUE(testing::bitwiseEqual(ga, gb)) << nc.name;
  }
}

TEST(NormTest, ZeroRowsAndNegativeSizes) {
  float v = 1.0f;
  rmsNorm(&v, &v, 0, 16, kEps);
  layerNorm(&v, &v, 4, 0, kEps);
  EXPECT_EQ(v, 1.0f);
  EXPECT_THROW(rmsNorm(&v, &v, -1, 4, kEps), KernelError);
  EXPECT_THROW(layerNormGrad(&v, &v, &v, 1, -4, kEps), KernelError);
}

}  // namespace
}  // namespace pgq::kernels
