#include "kernels/optim.h"

#include <cmath>
#include <vector>

#include "kernels/kernel_error.h"
#include "kernels/vec_math.h"

namespace pgq::kernels {

void adamwUpdate(float* param, const float* grad, float* m, float* v, int64_t n,
                 const AdamWParams& p, float grad_scale) {
  vec::checkSizes("adamwUpdate", {n});
  if (p.step < 1) throw KernelError::format("adamwUpdate: step must be >= 1 (1-based), got {}", p.step);
  // torch computes these scalars in Python (f64) and the tensor ops take them as f32.
  const double bias1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bias2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  const __m256 decay = _mm256_set1_ps(static_cast<float>(1.0 - static_cast<double>(p.lr) * p.weight_decay));
  const __m256 b1 = _mm256_set1_ps(p.beta1);
  const __m256 one_minus_b1 = _mm256_set1_ps(static_cast<float>(1.0 - p.beta1));
  const __m256 b2 = _mm256_set1_ps(p.beta2);
  const __m256 one_minus_b2 = _mm256_set1_ps(static_cast<float>(1.0 - p.beta2));
  const __m256 neg_step_size = _mm256_set1_ps(static_cast<float>(-p.lr / bias1));
  const __m256 bias2_sqrt = _mm256_set1_ps(static_cast<float>(std::sqrt(bias2)));
  const __m256 eps = _mm256_set1_ps(p.eps);
  const __m256 scale = _mm256_set1_ps(grad_scale);
  // Each step follows torch's operation order (one rounding per tensor op), so results
  // match torch to an ulp or so rather than only to the formula.
  vec::parallelRanges(n, 4, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i += 8) {
      const int64_t k = end - i;
      const __m256 g = _mm256_mul_ps(vec::loadPart(grad + i, k), scale);
      const __m256 pw = _mm256_mul_ps(vec::loadPart(param + i, k), decay);
      const __m256 mv = _mm256_add_ps(_mm256_mul_ps(vec::loadPart(m + i, k), b1), _mm256_mul_ps(g, one_minus_b1));
      // addcmul_(g, g, value=c) is self + (c * g) * g; addcdiv_(m, d, value=c) is
      // self + (c * m) / d.
      const __m256 vv = _mm256_add_ps(_mm256_mul_ps(vec::loadPart(v + i, k), b2),
                                      _mm256_mul_ps(_mm256_mul_ps(one_minus_b2, g), g));
      const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), bias2_sqrt), eps);
      const __m256 pn = _mm256_add_ps(pw, _mm256_div_ps(_mm256_mul_ps(neg_step_size, mv), denom));
      vec::storePart(m + i, k, mv);
      vec::storePart(v + i, k, vv);
      vec::storePart(param + i, k, pn);
    }
  });
}

double sumSquares(const float* x, int64_t n) {
  vec::checkSizes("sumSquares", {n});
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
  vec::parallelRanges(blocks, kBlock, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const float* xb = x + b * kBlock;
      const int64_t len = std::min(kBlock, n - b * kBlock);
      partial[static_cast<size_t>(b)] = vec::sumVectors(len, [&](int64_t i, int64_t k) {
        const __m256 v = vec::loadPart(xb + i, k);
        return _mm256_mul_ps(v, v);
      });
    }
  });
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace pgq::kernels
