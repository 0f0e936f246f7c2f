#include "kernels/optim.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include <gtest/gtest.h>

#include "kernels/cpu_isa.h"
#include "kernels/kernel_error.h"
#include "kernels/quantize.h"
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

// The fused update makes each quantization of the updated parameter as adamwUpdate
// followed by quantizeDynamic would, bit for bit: scales along the rows (one-pass per
// row), along the columns (ranges folded chunk by chunk), symmetric and asymmetric, both
// storage types, shapes that cut chunks unevenly, NaN and Inf in the parameter, at 1 and 2
// threads and on both the 256- and 512-bit store paths.
TEST(AdamWTest, FusedQuantizationsEqualTheSeparateKernels) {
  struct Case {
    int64_t rows, cols;
  };
  const Case cases[] = {{1, 5}, {3, 8192}, {37, 768}, {130, 96}, {9, 2500}, {1000, 8}};
  const char* formats[] = {"int8:channel:rtn", "int8:block32:rtn", "int8:channel:rtn:asym", "int4:channel:rtn"};
  const AdamWParams p{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3};
  const bool had_wide = avx512Kernels();
  int checked = 0;
  for (bool wide : {false, true}) {
    if (wide && !had_wide) continue;
    setAvx512Kernels(wide);
    for (const Case& c : cases) {
      const int64_t n = c.rows * c.cols;
      std::vector<float> param0 = randomVector(n, 5, -1.0f, 1.0f), grad = randomVector(n, 6, -3.0f, 3.0f);
      std::vector<float> m0 = randomVector(n, 7, -0.1f, 0.1f), v0 = randomVector(n, 8, 0.0f, 0.1f);
      if (c.rows >= 3) {
        // Row 2 updated to -0 throughout (a weight row nothing moves): its scale comes
        // from a zero magnitude, as the separate kernels take it.
        for (int64_t i = 2 * c.cols; i < 3 * c.cols; ++i) {
          param0[size_t(i)] = -0.0f;
          grad[size_t(i)] = m0[size_t(i)] = v0[size_t(i)] = 0.0f;
        }
      }
      for (const char* text : formats) {
        for (bool along_rows : {true, false}) {
          const QuantFormat format = QuantFormat::parse(text);
          const OperandView view{1, c.rows, c.cols, along_rows};
          if (!fusesIntoUpdate(view, format)) continue;
          for (int threads : kThreadCounts) {
            ThreadCount tc(threads);
            std::vector<float> pa = param0, ma = m0, va = v0, pb = param0, mb = m0, vb = v0;
            // A NaN and an Inf in the parameter (a diverged element): the scales skip them.
            if (n > 40) pa[17] = pb[17] = std::numeric_limits<float>::quiet_NaN();
            if (n > 40) pa[40] = pb[40] = std::numeric_limits<float>::infinity();
            const size_t count = static_cast<size_t>(quantParamCount(view, format));
            std::vector<float> params_a(count), params_b(count);
            std::vector<int8_t> rhs_a(n), rhs_b(n);
            std::vector<uint8_t> lhs_a(n), lhs_b(n);
            std::vector<float> params_lhs_a(count), params_lhs_b(count);
            adamwUpdate(pa.data(), grad.data(), ma.data(), va.data(), n, p, 0.5f);
            quantizeDynamic(pa, view, format, params_a, std::span<int8_t>(rhs_a));
            quantizeDynamic(pa, view, format, params_lhs_a, std::span<uint8_t>(lhs_a));
            const ParamQuantization qs[] = {{view, format, GemmSide::kRhs, params_b, rhs_b.data()},
                                            {view, format, GemmSide::kLhs, params_lhs_b, lhs_b.data()}};
            adamwUpdateQuantized(pb.data(), grad.data(), mb.data(), vb.data(), n, p, 0.5f, qs);
            const std::string where = fmt::format("{}x{} {} K along {} threads {} wide {}", c.rows, c.cols, text,
                                                  along_rows ? "cols" : "rows", threads, wide);
            ASSERT_EQ(0, std::memcmp(pa.data(), pb.data(), n * sizeof(float))) << where;
            ASSERT_EQ(ma, mb) << where;
            ASSERT_EQ(va, vb) << where;
            ASSERT_EQ(params_a, params_b) << where;
            ASSERT_EQ(params_lhs_a, params_lhs_b) << where;
            ASSERT_EQ(rhs_a, rhs_b) << where;
            ASSERT_EQ(lhs_a, lhs_b) << where;
            ++checked;
          }
        }
      }
    }
  }
  setAvx512Kernels(had_wide);
  // 6 shapes x (3 formats x 2 layouts + the block format along the rows) x 2 thread counts, per store path.
  EXPECT_EQ(checked, (had_wide ? 2 : 1) * 6 * 7 * 2);
}

// What the fused update does not make: stochastic rounding, clipping, emulated formats,
// per-tensor scales, blocks along the rows; and buffers that do not fit.
TEST(AdamWTest, FusedUpdateRefusesWhatItDoesNotMake) {
  const OperandView rows{1, 4, 8, true}, cols{1, 4, 8, false};
  EXPECT_FALSE(fusesIntoUpdate(rows, QuantFormat::parse("int8:channel:sr")));
  EXPECT_FALSE(fusesIntoUpdate(rows, QuantFormat::parse("int8:tensor:rtn")));
  EXPECT_FALSE(fusesIntoUpdate(cols, QuantFormat::parse("int8:block32:rtn")));
  EXPECT_FALSE(fusesIntoUpdate(rows, QuantFormat::parse("e4m3:channel:rtn")));
  EXPECT_TRUE(fusesIntoUpdate(cols, QuantFormat::parse("int8:channel:rtn")));
  std::vector<float> x(32, 0.5f), params(8);
  std::vector<int8_t> out(32);
  const AdamWParams p{1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1};
  const ParamQuantization sr[] = {{rows, QuantFormat::parse("int8:channel:sr"), GemmSide::kRhs, params, out.data()}};
  EXPECT_THROW(adamwUpdateQuantized(x.data(), x.data(), x.data(), x.data(), 32, p, 1.0f, sr), KernelError);
  const ParamQuantization short_params[] = {
      {rows, QuantFormat::parse("int8:channel:rtn"), GemmSide::kRhs, std::span<float>(params).first(3), out.data()}};
  EXPECT_THROW(adamwUpdateQuantized(x.data(), x.data(), x.data(), x.data(), 32, p, 1.0f, short_params), KernelError);
  const ParamQuantization wrong_size[] = {
      {OperandView{1, 4, 4, true}, QuantFormat::parse("int8:channel:rtn"), GemmSide::kRhs, std::span<float>(params).first(4), out.data()}};
  EXPECT_THROW(adamwUpdateQuantized(x.data(), x.data(), x.data(), x.data(), 32, p, 1.0f, wrong_size), KernelError);
}

}  // namespace
}  // namespace pgq::kernels
