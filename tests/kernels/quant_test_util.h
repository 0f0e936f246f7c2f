#pragma once
// Helpers shared by the quantization and int8 GEMM tests: seeded data, a thread-count
// guard, a scalar reference of the quantizer arithmetic (written from the formula in
// kernels/quant_core.h, independently of the vector code) and exact integer references.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/gemm_shape.h"
#include "kernels/quant_format.h"
#include "kernels/quantize.h"
#include "tests/kernels/f32_test_util.h"

namespace pgq::kernels::qtest {

inline std::vector<float> normalData(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

inline std::vector<float> uniformData(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

template <typename T>
std::vector<T> randomInts(int64_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& x : v) x = T(dist(gen));
  return v;
}

// The f32 kernels' tests' helper sets the OpenMP thread count for a scope.
using testing::ThreadCount;

// The group of element (b, r, c) of a view (quant_format.h order).
inline int64_t groupOf(const OperandView& view, const QuantFormat& format, int64_t b, int64_t r,
                       int64_t c) {
  const int64_t channel = view.contract_along_cols ? r : c;
  const int64_t along_k = view.contract_along_cols ? c : r;
  switch (format.granularity) {
    case Granularity::kPerTensor: return 0;
    case Granularity::kPerChannel: return b * view.channels() + channel;
    case Granularity::kPerBlock:
      return (b * view.channels() + channel) * blockCount(view, format) + along_k / format.block;
  }
  return 0;
}

// The stored integer of every element under round-to-nearest, scalar, from the
// documented formula (stochastic rounding has its own reference in quantize_test.cc).
inline std::vector<int> referenceQuantize(const std::vector<float>& x, const OperandView& view,
                                          const QuantFormat& format,
                                          const std::vector<float>& params, int storage_offset) {
  const int64_t groups = quantGroupCount(view, format);
  const QuantGrid grid = gridOf(format);
  std::vector<int> out(x.size());
  for (int64_t b = 0; b < view.batch; ++b) {
    for (int64_t r = 0; r < view.rows; ++r) {
      for (int64_t c = 0; c < view.cols; ++c) {
        const int64_t i = (b * view.rows + r) * view.cols + c;
        const int64_t g = groupOf(view, format, b, r, c);
        const float inv = 1.0f / params[g];
        const float zp = format.asymmetric ? params[groups + g] : 0.0f;
        float v = x[i] * inv;
        asm("" : "+x"(v));  // keep the product rounded to float, as the kernel does
        if (std::isnan(v)) v = 0.0f;
        float t = std::nearbyint(v) + (zp + float(storage_offset));
        t = std::fmin(std::fmax(t, float(grid.lo + storage_offset)),
                      float(grid.hi + storage_offset));
        out[i] = int(t);
      }
    }
  }
  return out;
}

// c[b,m,n] = sum_k (a[b,m,k] - za[b,m,k]) (b[b,k,n] - zb[b,k,n]) in int64, honouring
// the transposes. zero_a(b, m, k) and zero_b(b, k, n) give the zero points; they are
// tabulated once so the triple loop stays cheap.
template <typename ZeroA, typename ZeroB>
std::vector<int64_t> referenceGemmS64(const GemmShape& s, const std::vector<uint8_t>& a,
                                      const std::vector<int8_t>& b, ZeroA zero_a, ZeroB zero_b) {
  // Logical, zero-point-free operands: A' [batch, M, K] and B'^T [batch, N, K].
  std::vector<int64_t> at(size_t(s.sizeA())), bt(size_t(s.sizeB()));
  for (int64_t bi = 0; bi < s.batch; ++bi) {
    for (int64_t k = 0; k < s.k; ++k) {
      for (int64_t m = 0; m < s.m; ++m) {
        int64_t v = a[bi * s.m * s.k + (s.trans_a ? k * s.m + m : m * s.k + k)];
        at[(bi * s.m + m) * s.k + k] = v - zero_a(bi, m, k);
      }
      for (int64_t n = 0; n < s.n; ++n) {
        int64_t v = b[bi * s.k * s.n + (s.trans_b ? n * s.k + k : k * s.n + n)];
        bt[(bi * s.n + n) * s.k + k] = v - zero_b(bi, k, n);
      }
    }
  }
  std::vector<int64_t> c(size_t(s.sizeC()), 0);
  for (int64_t bi = 0; bi < s.batch; ++bi) {
    for (int64_t m = 0; m < s.m; ++m) {
      for (int64_t n = 0; n < s.n; ++n) {
        const int64_t* ar = &at[(bi * s.m + m) * s.k];
        const int64_t* br = &bt[(bi * s.n + n) * s.k];
        int64_t sum = 0;
        for (int64_t k = 0; k < s.k; ++k) sum += ar[k] * br[k];
        c[(bi * s.m + m) * s.n + n] = sum;
      }
    }
  }
  return c;
}

// C = op(A) op(B) in double.
inline std::vector<double> referenceGemmF64(const GemmShape& s, const std::vector<float>& a,
                                            const std::vector<float>& b) {
  std::vector<double> c(size_t(s.sizeC()), 0.0);
  for (int64_t bi = 0; bi < s.batch; ++bi) {
    for (int64_t m = 0; m < s.m; ++m) {
      for (int64_t n = 0; n < s.n; ++n) {
        double sum = 0.0;
        for (int64_t k = 0; k < s.k; ++k) {
          double av = a[bi * s.m * s.k + (s.trans_a ? k * s.m + m : m * s.k + k)];
          double bv = b[bi * s.k * s.n + (s.trans_b ? n * s.k + k : k * s.n + n)];
          sum += av * bv;
        }
        c[(bi * s.m + m) * s.n + n] = sum;
      }
    }
  }
  return c;
}

}  // namespace pgq::kernels::qtest
