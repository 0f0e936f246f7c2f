#include "kernels/elementwise.h"

#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu_isa.h"
#include "kernels/kernel_error.h"
#include "tests/kernels/f32_test_util.h"
#include "tests/kernels/wide_paths.h"

namespace pgq::kernels {
namespace {

using testing::Guarded;
using testing::kAwkwardSizes;
using testing::kThreadCounts;
using testing::maxRelError;
using testing::randomVector;
using testing::ThreadCount;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// 0.5 x (1 + tanh(u)) written as x / (1 + exp(-2u)): the same function, but without
// the cancellation that makes torch's form inaccurate below x ~ -5 even in f64.
double geluRef(double x) {
  const double beta = std::sqrt(2.0 / M_PI);
  return x / (1.0 + std::exp(-2.0 * beta * (x + 0.044715 * x * x * x)));
}

// torch's tanh-gelu backward formula, in f64.
double geluGradRef(double x) {
  const double beta = std::sqrt(2.0 / M_PI);
  const double kappa = 0.044715;
  const double t = std::tanh(beta * (x + kappa * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * beta * (1.0 + 3.0 * kappa * x * x);
}

double sigmoidRef(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double siluGradRef(double x) {
  const double s = sigmoidRef(x);
  return s * (1.0 + x * (1.0 - s));
}
double normalCdfRef(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double geluErfRef(double x) { return x * normalCdfRef(x); }
double geluErfGradRef(double x) { return normalCdfRef(x) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI); }

struct UnaryCase {
  UnaryOp op;
  const char* name;
  float lo, hi;  // input range
  double (*ref)(double);
  double rel_tol;  // relative error bound, |err| <= rel_tol * (|ref| + floor)
  double floor;
};

const UnaryCase kUnaryCases[] = {
    {UnaryOp::kNeg, "neg", -5.0f, 5.0f, [](double x) { return -x; }, 0.0, 1e-30},
    {UnaryOp::kExp, "exp", -80.0f, 80.0f, [](double x) { return std::exp(x); }, 2.5e-7, 0.0},
    {UnaryOp::kLog, "log", 1e-6f, 1e4f, [](double x) { return std::log(x); }, 2.5e-7, 0.0},
    {UnaryOp::kRsqrt, "rsqrt", 1e-6f, 1e6f, [](double x) { return 1.0 / std::sqrt(x); }, 1.5e-7, 0.0},
    {UnaryOp::kTanh, "tanh", -10.0f, 10.0f, [](double x) { return std::tanh(x); }, 3.5e-7, 0.0},
    {UnaryOp::kRelu, "relu", -3.0f, 3.0f, [](double x) { return x > 0 ? x : 0.0; }, 0.0, 1e-30},
    // The relative error grows with the exponent (~20 ulp at x = -5, where gelu is
    // -3e-6); below that the values are tiny and only their absolute error matters.
    {UnaryOp::kGelu, "gelu", -8.0f, 8.0f, geluRef, 4e-6, 1e-10},
    {UnaryOp::kSqrt, "sqrt", 0.0f, 1e6f, [](double x) { return std::sqrt(x); }, 6e-8, 1e-30},
    {UnaryOp::kSigmoid, "sigmoid", -80.0f, 80.0f, sigmoidRef, 3.5e-7, 0.0},
    {UnaryOp::kErf, "erf", -5.0f, 5.0f, [](double x) { return std::erf(x); }, 3.5e-7, 0.0},
    {UnaryOp::kSilu, "silu", -80.0f, 80.0f, [](double x) { return x * sigmoidRef(x); }, 3.5e-7, 0.0},
    // Relative accuracy holds into the lower tail (gelu_erf(-8) ~ -5e-15), where it
    // degrades with x^2 as the exponent -x^2/2 is rounded: ~4e-6 at x = -5, 6e-6 at -8.
    {UnaryOp::kGeluErf, "gelu_erf", -8.0f, 8.0f, geluErfRef, 8e-6, 1e-30},
};

TEST(UnaryTest, MatchesF64ReferenceOnAwkwardSizesAndThreads) {
  for (const UnaryCase& c : kUnaryCases) {
    for (int threads : kThreadCounts) {
      ThreadCount tc(threads);
      for (int64_t n : kAwkwardSizes) {
        const std::vector<float> x = randomVector(n, 17 + static_cast<uint32_t>(n), c.lo, c.hi);
        Guarded y(n);
        unary(c.op, x.data(), y.data(), n);
        std::vector<double> ref(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) ref[static_cast<size_t>(i)] = c.ref(x[static_cast<size_t>(i)]);
        EXPECT_LE(maxRelError(y.data(), ref, c.floor), c.rel_tol) << c.name << " n=" << n << " threads=" << threads;
        EXPECT_TRUE(y.guardsIntact()) << c.name << " n=" << n;
      }
    }
  }
}

// A dense sweep over every binade the functions are used in, finer than random data.
TEST(UnaryTest, TranscendentalsAreAccurateOverDenseSweep) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.0f; v += 0.0137f) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size());
  std::vector<double> ref(x.size());
  unary(UnaryOp::kExp, x.data(), y.data(), n);
  for (size_t i = 0; i < x.size(); ++i) ref[i] = std::exp(static_cast<double>(x[i]));
  EXPECT_LE(maxRelError(y.data(), ref, 0.0), 2.5e-7);
  unary(UnaryOp::kTanh, x.data(), y.data(), n);
  for (size_t i = 0; i < x.size(); ++i) ref[i] = std::tanh(static_cast<double>(x[i]));
  EXPECT_LE(maxRelError(y.data(), ref, 0.0), 3.5e-7);
  // log over 2^-149 .. 2^127: every binade, denormals included.
  std::vector<float> pos;
  for (int e = -149; e < 128; ++e)
    for (float m : {1.0f, 1.1f, 1.37f, 1.41421f, 1.5f, 1.9999f}) pos.push_back(std::ldexp(m, e));
  std::vector<float> ly(pos.size());
  std::vector<double> lref(pos.size());
  unary(UnaryOp::kLog, pos.data(), ly.data(), static_cast<int64_t>(pos.size()));
  for (size_t i = 0; i < pos.size(); ++i) lref[i] = std::log(static_cast<double>(pos[i]));
  EXPECT_LE(maxRelError(ly.data(), lref, 0.0), 2.5e-7);
  // Near 1 the result is small and relative accuracy is the hard part.
  std::vector<float> near1;
  for (int k = -2000; k <= 2000; ++k) near1.push_back(1.0f + static_cast<float>(k) * 1e-5f);
  std::vector<float> n1y(near1.size());
  std::vector<double> n1ref(near1.size());
  unary(UnaryOp::kLog, near1.data(), n1y.data(), static_cast<int64_t>(near1.size()));
  for (size_t i = 0; i < near1.size(); ++i) n1ref[i] = std::log(static_cast<double>(near1[i]));
  EXPECT_LE(maxRelError(n1y.data(), n1ref, 1e-30), 2.5e-7);
}

TEST(UnaryTest, SpecialValues) {
  auto apply = [](UnaryOp op, std::vector<float> x) {
    unary(op, x.data(), x.data(), static_cast<int64_t>(x.size()));
    return x;
  };
  const std::vector<float> e = apply(UnaryOp::kExp, {kInf, -kInf, kNaN, -1000.0f, 100.0f, 0.0f, -100.0f});
  EXPECT_EQ(e[0], kInf);
  EXPECT_EQ(e[1], 0.0f);
  EXPECT_TRUE(std::isnan(e[2]));
  EXPECT_EQ(e[3], 0.0f);
  EXPECT_EQ(e[4], kInf);
  EXPECT_EQ(e[5], 1.0f);
  // exp(-100) = 3.72e-44 is denormal: at most one denormal step away.
  EXPECT_NEAR(e[6], std::exp(-100.0), std::numeric_limits<float>::denorm_min());
  EXPECT_GT(e[6], 0.0f);

  // Every float from -110 to -80, across where exp's results become denormal and then 0
  // (vexp zeroes x <= -104 without computing it): within 2 ulp of exp, or one denormal step.
  std::vector<float> low;
  for (float v = -110.0f; v <= -80.0f; v = std::nextafter(v, 0.0f)) low.push_back(v);
  const std::vector<float> el = apply(UnaryOp::kExp, low);
  for (size_t i = 0; i < low.size(); ++i) {
    const double ref = std::exp(static_cast<double>(low[i]));
    // 2 ulp where the result is normal, one denormal step below.
    ASSERT_NEAR(el[i], ref, std::max<double>(std::numeric_limits<float>::denorm_min(), 2.4e-7 * ref)) << low[i];
    if (low[i] <= -104.0f) {
      ASSERT_EQ(el[i], 0.0f) << low[i];
    }
  }

  const std::vector<float> l = apply(UnaryOp::kLog, {0.0f, -1.0f, kInf, kNaN, 1.0f, std::numeric_limits<float>::denorm_min()});
  EXPECT_EQ(l[0], -kInf);
  EXPECT_TRUE(std::isnan(l[1]));
  EXPECT_EQ(l[2], kInf);
  EXPECT_TRUE(std::isnan(l[3]));
  EXPECT_EQ(l[4], 0.0f);
  EXPECT_NEAR(l[5], std::log(static_cast<double>(std::numeric_limits<float>::denorm_min())), 1e-4);

  const std::vector<float> t = apply(UnaryOp::kTanh, {kInf, -kInf, kNaN, 1e-30f, -0.0f, 50.0f});
  EXPECT_EQ(t[0], 1.0f);
  EXPECT_EQ(t[1], -1.0f);
  EXPECT_TRUE(std::isnan(t[2]));
  EXPECT_EQ(t[3], 1e-30f);
  EXPECT_TRUE(t[4] == 0.0f && std::signbit(t[4]));
  EXPECT_EQ(t[5], 1.0f);

  const std::vector<float> r = apply(UnaryOp::kRsqrt, {0.0f, -1.0f, kInf, 4.0f});
  EXPECT_EQ(r[0], kInf);
  EXPECT_TRUE(std::isnan(r[1]));
  EXPECT_EQ(r[2], 0.0f);
  EXPECT_EQ(r[3], 0.5f);

  EXPECT_TRUE(std::isnan(apply(UnaryOp::kRelu, {kNaN})[0]));
  const std::vector<float> g = apply(UnaryOp::kGelu, {kNaN, kInf, -30.0f, 30.0f, 0.0f});
  EXPECT_TRUE(std::isnan(g[0]));
  EXPECT_EQ(g[1], kInf);
  EXPECT_EQ(g[2], 0.0f);
  EXPECT_EQ(g[3], 30.0f);
  EXPECT_EQ(g[4], 0.0f);
}

TEST(UnaryTest, SpecialValuesOfTheImporterOps) {
  auto apply = [](UnaryOp op, std::vector<float> x) {
    unary(op, x.data(), x.data(), static_cast<int64_t>(x.size()));
    return x;
  };
  const std::vector<float> r = apply(UnaryOp::kSqrt, {0.0f, -1.0f, kInf, 4.0f, kNaN});
  EXPECT_EQ(r[0], 0.0f);
  EXPECT_TRUE(std::isnan(r[1]));
  EXPECT_EQ(r[2], kInf);
  EXPECT_EQ(r[3], 2.0f);
  EXPECT_TRUE(std::isnan(r[4]));
  const std::vector<float> s = apply(UnaryOp::kSigmoid, {kInf, -kInf, kNaN, 0.0f, -200.0f});
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_EQ(s[3], 0.5f);
  EXPECT_EQ(s[4], 0.0f);
  const std::vector<float> e = apply(UnaryOp::kErf, {kInf, -kInf, kNaN, 0.0f, 1e-30f, 10.0f});
  EXPECT_EQ(e[0], 1.0f);
  EXPECT_EQ(e[1], -1.0f);
  EXPECT_TRUE(std::isnan(e[2]));
  EXPECT_EQ(e[3], 0.0f);
  EXPECT_NEAR(e[4], 1.1283791670955126e-30, 1e-36);  // 2/sqrt(pi) x near 0
  EXPECT_EQ(e[5], 1.0f);
  const std::vector<float> si = apply(UnaryOp::kSilu, {kInf, kNaN, -200.0f, 200.0f});
  EXPECT_EQ(si[0], kInf);
  EXPECT_TRUE(std::isnan(si[1]));
  EXPECT_EQ(si[2], 0.0f);
  EXPECT_EQ(si[3], 200.0f);
  // As torch: gelu_erf(-inf) = -inf * 0 is NaN.
  const std::vector<float> g = apply(UnaryOp::kGeluErf, {kInf, -kInf, kNaN, -30.0f, 30.0f, 0.0f});
  EXPECT_EQ(g[0], kInf);
  EXPECT_TRUE(std::isnan(g[1]));
  EXPECT_TRUE(std::isnan(g[2]));
  EXPECT_EQ(g[3], 0.0f);
  EXPECT_EQ(g[4], 30.0f);
  EXPECT_EQ(g[5], 0.0f);
}

TEST(UnaryTest, ResultsDoNotDependOnThreadCount) {
  const int64_t n = 50001;
  const std::vector<float> x = randomVector(n, 3, -6.0f, 6.0f);
  for (UnaryOp op : {UnaryOp::kExp, UnaryOp::kTanh, UnaryOp::kGelu, UnaryOp::kSigmoid, UnaryOp::kErf,
                     UnaryOp::kSilu, UnaryOp::kGeluErf}) {
    std::vector<float> y1(x.size()), y2(x.size());
    {
      ThreadCount tc(1);
      unary(op, x.data(), y1.data(), n);
    }
    {
      ThreadCount tc(2);
      unary(op, x.data(), y2.data(), n);
    }
    EXPECT_TRUE(testing::bitwiseEqual(y1, y2));
  }
}

float applyRef(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kMax: return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
    case BinaryOp::kGe: return a >= b ? 1.0f : 0.0f;
  }
  return kNaN;
}

float operandAt(const std::vector<float>& v, Bcast b, int64_t o, int64_t i, int64_t inner) {
  switch (b) {
    case Bcast::kFull: return v[static_cast<size_t>(o * inner + i)];
    case Bcast::kRow: return v[static_cast<size_t>(i)];
    case Bcast::kCol: return v[static_cast<size_t>(o)];
    case Bcast::kScalar: return v[0];
  }
  return kNaN;
}

int64_t operandSize(Bcast b, int64_t outer, int64_t inner) {
  switch (b) {
    case Bcast::kFull: return outer * inner;
    case Bcast::kRow: return inner;
    case Bcast::kCol: return outer;
    case Bcast::kScalar: return 1;
  }
  return 0;
}

// f32 +,-,*,/ are correctly rounded, so results must match the scalar op bit for bit.
TEST(BinaryTest, EveryOpAndBroadcastMatchesScalarExactly) {
  const BinaryOp ops[] = {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul,
                          BinaryOp::kDiv, BinaryOp::kMax, BinaryOp::kGe};
  const Bcast bcasts[] = {Bcast::kFull, Bcast::kRow, Bcast::kCol, Bcast::kScalar};
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {3, 5}, {7, 1}, {1, 9}, {37, 19}, {41, 401}, {2, 8200}};
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (auto [outer, inner] : shapes) {
      for (BinaryOp op : ops) {
        for (Bcast ab : bcasts) {
          for (Bcast bb : bcasts) {
            std::vector<float> a = randomVector(operandSize(ab, outer, inner), 5, -2.0f, 2.0f);
            std::vector<float> b = randomVector(operandSize(bb, outer, inner), 6, -2.0f, 2.0f);
            // Some equal pairs so that kGe and kMax see ties.
            if (ab == bb) b[0] = a[0];
            Guarded y(outer * inner);
            binary(op, a.data(), ab, b.data(), bb, y.data(), outer, inner);
            int64_t mismatches = 0;
            for (int64_t o = 0; o < outer; ++o)
              for (int64_t i = 0; i < inner; ++i) {
                const float want = applyRef(op, operandAt(a, ab, o, i, inner), operandAt(b, bb, o, i, inner));
                if (std::memcmp(&want, y.data() + o * inner + i, sizeof(float)) != 0) ++mismatches;
              }
            EXPECT_EQ(mismatches, 0) << "op " << static_cast<int>(op) << " a " << static_cast<int>(ab) << " b "
                                     << static_cast<int>(bb) << " shape " << outer << "x" << inner;
            EXPECT_TRUE(y.guardsIntact());
          }
        }
      }
    }
  }
}

TEST(BinaryTest, InPlaceOnFullOperandAndNaNPropagation) {
  const int64_t outer = 64, inner = 300;
  std::vector<float> a = randomVector(outer * inner, 8);
  const std::vector<float> row = randomVector(inner, 9);
  const std::vector<float> a0 = a;
  binary(BinaryOp::kAdd, a.data(), Bcast::kFull, row.data(), Bcast::kRow, a.data(), outer, inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      ASSERT_EQ(a[static_cast<size_t>(o * inner + i)], a0[static_cast<size_t>(o * inner + i)] + row[static_cast<size_t>(i)]);

  const std::vector<float> x = {kNaN, 1.0f, 2.0f};
  const std::vector<float> z = {0.0f, kNaN, 1.0f};
  std::vector<float> m(3);
  binary(BinaryOp::kMax, x.data(), Bcast::kFull, z.data(), Bcast::kFull, m.data(), 1, 3);
  EXPECT_TRUE(std::isnan(m[0]));
  EXPECT_TRUE(std::isnan(m[1]));
  EXPECT_EQ(m[2], 2.0f);
  binary(BinaryOp::kGe, x.data(), Bcast::kFull, z.data(), Bcast::kFull, m.data(), 1, 3);
  EXPECT_EQ(m[0], 0.0f);
  EXPECT_EQ(m[1], 0.0f);
  EXPECT_EQ(m[2], 1.0f);
}

TEST(GeluGradTest, MatchesTorchFormulaInF64) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (int64_t n : kAwkwardSizes) {
      const std::vector<float> x = randomVector(n, 11, -9.0f, 9.0f);
      const std::vector<float> dy = randomVector(n, 12, -1.0f, 1.0f);
      Guarded dx(n);
      geluGrad(x.data(), dy.data(), dx.data(), n);
      std::vector<double> ref(static_cast<size_t>(n));
      for (size_t i = 0; i < ref.size(); ++i) ref[i] = dy[i] * geluGradRef(x[i]);
      // The derivative crosses zero near x = -0.75, where its terms cancel: there only
      // the absolute error counts (bound 8e-8, a few ulp of the terms).
      EXPECT_LE(maxRelError(dx.data(), ref, 1e-2), 8e-6) << "n=" << n;
      EXPECT_TRUE(dx.guardsIntact());
    }
  }
}

// The gradient kernel must be the derivative of the forward kernel's function.
TEST(GeluGradTest, MatchesCentralDifferencesOfForward) {
  const std::vector<float> x = randomVector(513, 13, -6.0f, 6.0f);
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<float> ones(x.size(), 1.0f);
  std::vector<float> dx(x.size());
  geluGrad(x.data(), ones.data(), dx.data(), n);
  std::vector<double> fd(x.size()), got(x.size());
  const double h = 1e-5;
  for (size_t i = 0; i < x.size(); ++i) {
    fd[i] = (geluRef(x[i] + h) - geluRef(x[i] - h)) / (2 * h);
    got[i] = dx[i];
  }
  EXPECT_LE(testing::relL2Error(got, fd), 1e-6);
  // And the f32 forward kernel itself, with a step large enough for f32 rounding.
  const float hf = 1e-2f;
  std::vector<float> xp(x), xm(x), yp(x.size()), ym(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xp[i] += hf;
    xm[i] -= hf;
  }
  unary(UnaryOp::kGelu, xp.data(), yp.data(), n);
  unary(UnaryOp::kGelu, xm.data(), ym.data(), n);
  for (size_t i = 0; i < x.size(); ++i)
    fd[i] = (static_cast<double>(yp[i]) - ym[i]) / (static_cast<double>(xp[i]) - xm[i]);
  EXPECT_LE(testing::relL2Error(got, fd), 1e-3);
}

TEST(GeluGradTest, ExtremeInputsStayFinite) {
  const std::vector<float> x = {-100.0f, -20.0f, -10.0f, 10.0f, 100.0f, 0.0f};
  const std::vector<float> dy(x.size(), 1.0f);
  std::vector<float> dx(x.size());
  geluGrad(x.data(), dy.data(), dx.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_TRUE(std::isfinite(dx[i])) << x[i];
    EXPECT_NEAR(dx[i], geluGradRef(x[i]), 1e-6) << x[i];
  }
}

struct ActivationGrad {
  const char* name;
  void (*kernel)(const float*, const float*, float*, int64_t);
  UnaryOp forward;
  double (*ref)(double);
};

const ActivationGrad kActivationGrads[] = {
    {"silu_grad", siluGrad, UnaryOp::kSilu, siluGradRef},
    {"gelu_erf_grad", geluErfGrad, UnaryOp::kGeluErf, geluErfGradRef},
};

TEST(ActivationGradTest, MatchesF64FormulaOnAwkwardSizesAndThreads) {
  for (const ActivationGrad& c : kActivationGrads) {
    for (int threads : kThreadCounts) {
      ThreadCount tc(threads);
      for (int64_t n : kAwkwardSizes) {
        const std::vector<float> x = randomVector(n, 21, -12.0f, 12.0f);
        const std::vector<float> dy = randomVector(n, 22, -1.0f, 1.0f);
        Guarded dx(n);
        c.kernel(x.data(), dy.data(), dx.data(), n);
        std::vector<double> ref(static_cast<size_t>(n));
        for (size_t i = 0; i < ref.size(); ++i) ref[i] = dy[i] * c.ref(x[i]);
        // Both derivatives cross zero (silu's near x = -1.28, gelu_erf's near -0.75),
        // where their terms cancel: there only the absolute error counts (5e-8).
        EXPECT_LE(maxRelError(dx.data(), ref, 1e-2), 5e-6) << c.name << " n=" << n;
        EXPECT_TRUE(dx.guardsIntact()) << c.name;
      }
    }
  }
}

// Each gradient kernel must be the derivative of its forward kernel.
TEST(ActivationGradTest, MatchesCentralDifferencesOfForwardKernel) {
  for (const ActivationGrad& c : kActivationGrads) {
    const std::vector<float> x = randomVector(513, 23, -6.0f, 6.0f);
    const int64_t n = static_cast<int64_t>(x.size());
    const std::vector<float> ones(x.size(), 1.0f);
    std::vector<float> dx(x.size());
    c.kernel(x.data(), ones.data(), dx.data(), n);
    const float h = 1e-2f;
    std::vector<float> xp(x), xm(x), yp(x.size()), ym(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      xp[i] += h;
      xm[i] -= h;
    }
    unary(c.forward, xp.data(), yp.data(), n);
    unary(c.forward, xm.data(), ym.data(), n);
    std::vector<double> got(x.size()), fd(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      got[i] = dx[i];
      fd[i] = (static_cast<double>(yp[i]) - ym[i]) / (static_cast<double>(xp[i]) - xm[i]);
    }
    EXPECT_LE(testing::relL2Error(got, fd), 1e-3) << c.name;
  }
}

TEST(ActivationGradTest, ExtremeInputsStayFinite) {
  const std::vector<float> x = {-100.0f, -20.0f, -10.0f, 10.0f, 100.0f, 0.0f};
  const std::vector<float> dy(x.size(), 1.0f);
  for (const ActivationGrad& c : kActivationGrads) {
    std::vector<float> dx(x.size());
    c.kernel(x.data(), dy.data(), dx.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_TRUE(std::isfinite(dx[i])) << c.name << " " << x[i];
      EXPECT_NEAR(dx[i], c.ref(x[i]), 1e-6) << c.name << " " << x[i];
    }
  }
}

// Where the CPU has AVX-512, gelu, silu and their gradients take 16 lanes at a time
// (elementwise.cc, mapWide): every element must get the 256-bit path's bits, over
// lengths that end in a full 512-bit vector, a 256-bit one and a masked tail, at 1 and
// 2 threads, with NaN, infinities, -0, denormals and exponents that overflow. On a CPU
// without AVX-512 the switch must stay off.
TEST(ActivationGradTest, WidePathGivesTheResultsOfThe256BitPath) {
  const testing::WidePaths wide_paths;
  if (!wide_paths.available()) return;  // the 256-bit path is the only one here
  const float kSpecial[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -0.0f, 0.0f, 1e-40f, -1e-40f,
                            100.0f, -100.0f, 88.5f, -88.5f, 1e30f, -1e30f, 3.0f, -3.0f, 0.5f};
  int64_t compared = 0;
  for (int threads : {1, 2}) {
    ThreadCount tc(threads);
    for (int64_t n : {1, 15, 16, 17, 24, 31, 32, 33, 47, 100, 4099, 40000}) {
      std::vector<float> x = randomVector(n, 90 + static_cast<uint32_t>(n), -12.0f, 12.0f);
      const std::vector<float> dy = randomVector(n, 91 + static_cast<uint32_t>(n));
      for (int64_t i = 0; i < n; i += 3) x[static_cast<size_t>(i)] = kSpecial[(i / 3) % 16];
      auto run = [&](bool wide) {
        setAvx512Kernels(wide);
        std::vector<float> g(x.size()), s(x.size()), gg(x.size()), sg(x.size());
        unary(UnaryOp::kGelu, x.data(), g.data(), n);
        unary(UnaryOp::kSilu, x.data(), s.data(), n);
        geluGrad(x.data(), dy.data(), gg.data(), n);
        siluGrad(x.data(), dy.data(), sg.data(), n);
        return std::vector<std::vector<float>>{g, s, gg, sg};
      };
      const auto wide = run(true);
      const auto narrow = run(false);
      const char* names[] = {"gelu", "silu", "geluGrad", "siluGrad"};
      for (size_t k = 0; k < 4; ++k) {
        EXPECT_TRUE(testing::bitwiseEqual(wide[k], narrow[k])) << names[k] << ", n " << n << ", " << threads << " threads";
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 2 * 12 * 4);
}

// swiglu and its gradients must give, element for element, what the separate kernels
// give: silu then mul forward; mul(dy, up) then siluGrad, and mul(dy, silu) backward
// (autodiff's order; a NaN may differ in sign, equalUpToNanBits); on the 256-bit and, where the CPU has it,
// the 512-bit path, ragged sizes, 1 and 2 threads, in place.
TEST(SwigluTest, GivesTheSeparateKernelsResultsBitForBit) {
  const testing::WidePaths wide_paths;
  const float kSpecial[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -0.0f, 1e-40f, 100.0f, -100.0f, 88.5f, 1e30f};
  int64_t compared = 0;
  for (bool wide : {false, true}) {
    if (wide && !wide_paths.available()) continue;
    setAvx512Kernels(wide);
    for (int threads : kThreadCounts) {
      ThreadCount tc(threads);
      for (int64_t n : {1, 7, 15, 16, 17, 31, 33, 100, 4099, 40000}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << ", " << threads << " threads, wide " << wide);
        std::vector<float> g = randomVector(n, 95, -12.0f, 12.0f), u = randomVector(n, 96), dy = randomVector(n, 97);
        for (int64_t i = 0; i < n; i += 5) g[static_cast<size_t>(i)] = kSpecial[(i / 5) % 9];
        for (int64_t i = 2; i < n; i += 7) u[static_cast<size_t>(i)] = kSpecial[(i / 7) % 9];
        for (int64_t i = 3; i < n; i += 11) dy[static_cast<size_t>(i)] = kSpecial[(i / 11) % 9];
        auto mul = [&](const std::vector<float>& a, const std::vector<float>& b) {
          std::vector<float> y(a.size());
          binary(BinaryOp::kMul, a.data(), Bcast::kFull, b.data(), Bcast::kFull, y.data(), 1, n);
          return y;
        };
        std::vector<float> s(g.size()), want_dg(g.size());
        unary(UnaryOp::kSilu, g.data(), s.data(), n);
        const std::vector<float> want_y = mul(s, u), dsilu = mul(dy, u), want_du = mul(dy, s);
        siluGrad(g.data(), dsilu.data(), want_dg.data(), n);

        Guarded y(n), dg(n), du(n);
        swiglu(g.data(), u.data(), y.data(), n);
        swigluGrad(SwigluOperand::kGate, g.data(), u.data(), dy.data(), dg.data(), n);
        swigluGrad(SwigluOperand::kUp, g.data(), nullptr, dy.data(), du.data(), n);
        EXPECT_TRUE(y.guardsIntact() && dg.guardsIntact() && du.guardsIntact());
        ASSERT_TRUE(testing::equalUpToNanBits(y.values(), want_y)) << "swiglu";
        ASSERT_TRUE(testing::equalUpToNanBits(dg.values(), want_dg)) << "gradient of gate";
        ASSERT_TRUE(testing::equalUpToNanBits(du.values(), want_du)) << "gradient of up";
        std::vector<float> over_up = u, over_dy = dy;
        swiglu(g.data(), over_up.data(), over_up.data(), n);
        swigluGrad(SwigluOperand::kGate, g.data(), u.data(), over_dy.data(), over_dy.data(), n);
        EXPECT_TRUE(testing::equalUpToNanBits(over_up, want_y)) << "in place";
        EXPECT_TRUE(testing::equalUpToNanBits(over_dy, want_dg)) << "in place";
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, (wide_paths.available() ? 2 : 1) * 2 * 10);
  EXPECT_THROW(swiglu(nullptr, nullptr, nullptr, -1), KernelError);
}

TEST(SelectTest, PicksWhereConditionIsNonzero) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (int64_t n : kAwkwardSizes) {
      std::vector<float> cond = randomVector(n, 24);
      for (size_t i = 0; i < cond.size(); i += 3) cond[i] = 0.0f;
      if (n > 4) {
        cond[1] = -0.0f;
        cond[2] = kNaN;  // nonzero, as `cond != 0` says
      }
      const std::vector<float> a = randomVector(n, 25), b = randomVector(n, 26);
      Guarded y(n);
      select(cond.data(), a.data(), b.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(i);
        ASSERT_EQ(y[i], cond[k] != 0.0f ? a[k] : b[k]) << i;
      }
      EXPECT_TRUE(y.guardsIntact());
    }
  }
}

TEST(ReluGradTest, PassesGradientWherePositive) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (int64_t n : kAwkwardSizes) {
      std::vector<float> x = randomVector(n, 14);
      if (n > 2) x[1] = 0.0f;
      const std::vector<float> dy = randomVector(n, 15);
      Guarded dx(n);
      reluGrad(x.data(), dy.data(), dx.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const size_t s = static_cast<size_t>(i);
        ASSERT_EQ(dx[i], x[s] > 0.0f ? dy[s] : 0.0f) << i;
      }
      EXPECT_TRUE(dx.guardsIntact());
    }
  }
}

TEST(FillCopyTest, WriteExactlyNElements) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (int64_t n : kAwkwardSizes) {
      Guarded y(n);
      fill(y.data(), n, 2.5f);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 2.5f);
      EXPECT_TRUE(y.guardsIntact());
      const std::vector<float> x = randomVector(n, 16);
      Guarded z(n);
      copy(x.data(), z.data(), n);
      EXPECT_EQ(z.values(), x);
      EXPECT_TRUE(z.guardsIntact());
    }
  }
}

TEST(ElementwiseErrorsTest, NegativeSizesThrow) {
  float v = 0.0f;
  EXPECT_THROW(unary(UnaryOp::kExp, &v, &v, -1), KernelError);
  EXPECT_THROW(binary(BinaryOp::kAdd, &v, Bcast::kFull, &v, Bcast::kFull, &v, 2, -3), KernelError);
  EXPECT_THROW(geluGrad(&v, &v, &v, -8), KernelError);
  EXPECT_THROW(siluGrad(&v, &v, &v, -8), KernelError);
  EXPECT_THROW(geluErfGrad(&v, &v, &v, -8), KernelError);
  EXPECT_THROW(select(&v, &v, &v, &v, -1), KernelError);
}

}  // namespace
}  // namespace pgq::kernels
