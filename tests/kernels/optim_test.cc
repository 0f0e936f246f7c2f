#include "kernels/optim.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernel_error.h"
#include "tests/kernels/f32_test_util.h"

namespace pgq::kernels {
namespace {

using testing::kAwkwardSizes;
using testing::kThreadCounts;
using testing::randomVector;
using testing::ThreadCount;

// torch.optim.AdamW (1.13, _single_tensor_adamw) for one element, in f64:
//   param.mul_(1 - lr * weight_decay)
//   exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
//   denom = (exp_avg_sq.sqrt() / sqrt(1 - beta2**step)).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**step))
struct AdamState {
  double param, m, v;
};

void adamwRef(AdamState& s, double grad, const AdamWParams& p) {
  const double lr = p.lr, b1 = p.beta1, b2 = p.beta2, eps = p.eps, wd = p.weight_decay;
  s.param *= 1.0 - lr * wd;
  s.m = s.m * b1 + (1.0 - b1) * grad;
  s.v = s.v * b2 + (1.0 - b2) * grad * grad;
  const double denom = std::sqrt(s.v) / std::sqrt(1.0 - std::pow(b2, p.step)) + eps;
  s.param -= lr / (1.0 - std::pow(b1, p.step)) * s.m / denom;
}

TEST(AdamWTest, MatchesTorchFormulaOverSeveralSteps) {
  AdamWParams p{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0};
  const float grad_scale = 0.5f;  // as if clipped by 2
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (int64_t n : kAwkwardSizes) {
      std::vector<float> param = randomVector(n, 81, -1.0f, 1.0f);
      std::vector<float> m(static_cast<size_t>(n), 0.0f), v(static_cast<size_t>(n), 0.0f);
      std::vector<AdamState> ref(static_cast<size_t>(n));
      for (size_t i = 0; i < ref.size(); ++i) ref[i] = {param[i], 0.0, 0.0};
      for (int64_t step = 1; step <= 4; ++step) {
        p.step = step;
        std::vector<float> grad = randomVector(n, 82 + static_cast<uint32_t>(step), -3.0f, 3.0f);
        if (n > 3) grad[2] = 0.0f;  // a zero gradient must leave only the decay
        adamwUpdate(param.data(), grad.data(), m.data(), v.data(), n, p, grad_scale);
        for (size_t i = 0; i < ref.size(); ++i) adamwRef(ref[i], static_cast<double>(grad[i]) * grad_scale, p);
      }
      for (size_t i = 0; i < ref.size(); ++i) {
        // Each step moves a parameter by ~lr; f32 rounding of the state is ~1e-7 relative
        // to the terms added, and m's terms (|g| <= 1.5) can cancel.
        ASSERT_NEAR(param[i], ref[i].param, 1e-6 * std::abs(ref[i].param) + 1e-9) << i << " n=" << n;
        ASSERT_NEAR(m[i], ref[i].m, 1e-6 * std::abs(ref[i].m) + 1e-7) << i;
        ASSERT_NEAR(v[i], ref[i].v, 1e-6 * std::abs(ref[i].v) + 1e-12) << i;
      }
    }
  }
}

TEST(AdamWTest, FirstStepMovesEachParameterByLearningRate) {
  // After bias correction the first Adam step is lr * g / (|g| + eps'): exactly -lr *
  // sign(g) up to eps, whatever the gradient's magnitude.
  const AdamWParams p{0.01f, 0.9f, 0.999f, 1e-12f, 0.0f, 1};
  std::vector<float> param = {1.0f, 1.0f, 1.0f};
  const std::vector<float> grad = {1e-3f, -50.0f, 7.0f};
  std::vector<float> m(3, 0.0f), v(3, 0.0f);
  adamwUpdate(param.data(), grad.data(), m.data(), v.data(), 3, p, 1.0f);
  EXPECT_NEAR(param[0], 0.99f, 1e-6);
  EXPECT_NEAR(param[1], 1.01f, 1e-6);
  EXPECT_NEAR(param[2], 0.99f, 1e-6);
}

TEST(AdamWTest, InvalidArgumentsThrow) {
  float x = 0.0f;
  EXPECT_THROW(adamwUpdate(&x, &x, &x, &x, 1, AdamWParams{1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0}, 1.0f),
               KernelError);
  EXPECT_THROW(adamwUpdate(&x, &x, &x, &x, -1, AdamWParams{1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1}, 1.0f),
               KernelError);
}

TEST(SumSquaresTest, MatchesF64AndIgnoresThreadCount) {
  for (int64_t n : kAwkwardSizes) {
    const std::vector<float> x = randomVector(n, 83, -2.0f, 2.0f);
    double ref = 0.0;
    for (float v : x) ref += static_cast<double>(v) * v;
    double one, two;
    {
      ThreadCount tc(1);
      one = sumSquares(x.data(), n);
    }
    {
      ThreadCount tc(2);
      two = sumSquares(x.data(), n);
    }
    // f32 squares summed 16 at a time before f64: relative error ~1e-7 at most.
    EXPECT_NEAR(one, ref, 2e-7 * ref) << n;
    EXPECT_EQ(one, two) << n;
  }
  // A large sum of tiny and huge values, as gradient norms mix layers.
  std::vector<float> mixed(1 << 20, 1e-3f);
  mixed[12345] = 1e4f;
  const double expected = (mixed.size() - 1) * static_cast<double>(1e-3f) * 1e-3f + 1e8;
  EXPECT_NEAR(sumSquares(mixed.data(), static_cast<int64_t>(mixed.size())), expected, 1e-6 * expected);
}

}  // namespace
}  // namespace pgq::kernels
