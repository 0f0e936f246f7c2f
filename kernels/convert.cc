#include "kernels/convert.h"

#include <cstring>

#include "kernels/vec_math.h"

namespace pgq::kernels {
namespace {

// Work splits at multiples of 16 elements: whole cache lines of f32 output and whole
// 16-lane steps of the bf16 packing loop.
constexpr int64_t kAlign = 16;

// f32 bits rounded to nearest-even at bit 16, low half cleared. Adding 0x7fff plus the
// lowest kept bit carries into the kept bits exactly when the dropped half is above
// the tie, or at the tie with an odd kept value. A NaN gets its quiet bit set first:
// a NaN whose payload sits only in the low half would otherwise become inf.
inline __m256i roundBits(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  const __m256i quiet_nan = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_and_si256(_mm256_blendv_epi8(rounded, quiet_nan, is_nan),
                          _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
}

// 16 bf16 patterns from two vectors of rounded bits (their high halves).
inline __m256i packHigh(__m256i a, __m256i b) {
  // packus works per 128-bit lane; the permute puts the four quarters back in order.
  const __m256i packed = _mm256_packus_epi32(_mm256_srli_epi32(a, 16), _mm256_srli_epi32(b, 16));
  return _mm256_permute4x64_epi64(packed, 0xD8);
}

uint16_t roundOne(float x) {
  alignas(32) float in[8] = {x};
  alignas(32) uint32_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), roundBits(_mm256_load_ps(in)));
  return static_cast<uint16_t>(out[0] >> 16);
}

}  // namespace

void roundToBf16(const float* x, float* y, int64_t n) {
  vec::checkSizes("roundToBf16", {n});
  vec::parallelRanges(n, 1, kAlign, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i += 8) {
      const int64_t k = end - i;
      vec::storePart(y + i, k, _mm256_castsi256_ps(roundBits(vec::loadPart(x + i, k))));
    }
  });
}

void f32ToBf16(const float* x, uint16_t* y, int64_t n) {
  vec::checkSizes("f32ToBf16", {n});
  vec::parallelRanges(n, 1, kAlign, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    for (; i + 16 <= end; i += 16) {
      const __m256i a = roundBits(_mm256_loadu_ps(x + i));
      const __m256i b = roundBits(_mm256_loadu_ps(x + i + 8));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), packHigh(a, b));
    }
    for (; i < end; ++i) y[i] = roundOne(x[i]);
  });
}

void bf16ToF32(const uint16_t* x, float* y, int64_t n) {
  vec::checkSizes("bf16ToF32", {n});
  vec::parallelRanges(n, 1, kAlign, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
      _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; i < end; ++i) {
      const uint32_t bits = static_cast<uint32_t>(x[i]) << 16;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      y[i] = f;
    }
  });
}

}  // namespace pgq::kernels
