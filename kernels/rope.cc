#include "kernels/rope.h"

#include <cmath>

#include "kernels/vec_math.h"

namespace pgq::kernels {

using vec::loadPart;
using vec::storePart;

RopeTable ropeTable(int64_t seq, int64_t dim, double theta) {
  vec::checkSizes("ropeTable", {seq, dim});
  if (dim % 2 != 0) throw KernelError::format("ropeTable: dim pairs i with i + dim/2, so it must be even, got {}", dim);
  if (!(theta > 0.0) || !std::isfinite(theta)) throw KernelError::format("ropeTable: theta must be > 0, got {}", theta);
  RopeTable table{seq, dim / 2, {}, {}};
  table.cos.resize(static_cast<size_t>(seq * table.half));
  table.sin.resize(table.cos.size());
  for (int64_t i = 0; i < table.half; ++i) {
    const double frequency = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
    for (int64_t t = 0; t < seq; ++t) {
      // In double: an angle of a few thousand radians rounded to f32 is off by ~1e-4.
      const double angle = static_cast<double>(t) * frequency;
      const size_t at = static_cast<size_t>(t * table.half + i);
      table.cos[at] = static_cast<float>(std::cos(angle));
      table.sin[at] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

void rope(const float* x, float* y, int64_t rows, const RopeTable& table, RopeRotation rotation) {
  vec::checkSizes("rope", {rows, table.seq, table.half});
  const int64_t half = table.half, dim = 2 * half;
  if (table.cos.size() != static_cast<size_t>(table.seq * half) || table.sin.size() != table.cos.size())
    throw KernelError::format("rope: the table holds {} and {} angles, [seq {}, half {}] needs {}", table.cos.size(),
                              table.sin.size(), table.seq, half, table.seq * half);
  if (half == 0) return;
  // The inverse rotation turns by -angle: the same cos, sin with its sign flipped.
  const __m256 sign = _mm256_set1_ps(rotation == RopeRotation::kInverse ? -0.0f : 0.0f);
  vec::parallelRanges(rows * table.seq, dim, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t t = r % table.seq;
      const float* c = table.cos.data() + t * half;
      const float* s = table.sin.data() + t * half;
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      // Both halves are loaded before either is stored, so y may alias x.
      for (int64_t i = 0; i < half; i += 8) {
        const int64_t k = half - i;
        const __m256 a = loadPart(xr + i, k);
        const __m256 b = loadPart(xr + half + i, k);
        const __m256 vc = loadPart(c + i, k);
        const __m256 vs = _mm256_xor_ps(loadPart(s + i, k), sign);
        storePart(yr + i, k, _mm256_fnmadd_ps(b, vs, _mm256_mul_ps(a, vc)));         // a cos - b sin
        storePart(yr + half + i, k, _mm256_fmadd_ps(a, vs, _mm256_mul_ps(b, vc)));  // b cos + a sin
      }
    }
  });
}

}  // namespace pgq::kernels
