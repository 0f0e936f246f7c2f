#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011),
// the counter-based generator behind stochastic rounding. A counter-based generator
// maps (key, counter) to random bits with no state, so the noise an element gets is a
// pure function of (seed, offset, element index): reproducible for a seed and identical
// for any thread count or chunking. Philox4x32-10 passes TestU01 BigCrush with margin
// (7 rounds already pass), and each call yields 128 bits.
//
// Stochastic rounding uses 16 bits per element (8 elements per Philox call): the
// probability of rounding up is then quantized to multiples of 2^-16, so the rounding
// bias is below 2^-16 of a quantization step (a 5-sigma statistical test would need
// ~10^11 samples to see it). Element i of a tensor draws
//   counter = (lo32(c), hi32(c), lo32(offset), hi32(offset)), c = 8*(i/64) + i%8
//   key     = (lo32(seed), hi32(seed))
//   bits    = 16-bit half ((i/8)%2) of output word ((i%64)/16)
// so 8 lanes of one AVX2 Philox evaluation give 64 consecutive elements.
//
// Stochastic rounding no longer draws from Philox: it uses ARS-5 (kernels/sr_noise.h),
// which costs ~6 instead of ~45 vector instructions per 256 bits and brought SR within
// 1.5x of round-to-nearest. philox4x32 stays the generator of runtime/ (parameter
// initialization, data loading); philoxBits16 and PhiloxAvx2 keep the mapping above for
// code and tests that still refer to it.
#include <immintrin.h>

#include <array>
#include <cstdint>

namespace pgq::kernels {

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
inline constexpr int kPhiloxRounds = 10;

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Scalar reference implementation.
inline PhiloxCounter philox4x32(PhiloxCounter x, PhiloxKey key) {
  for (int round = 0; round < kPhiloxRounds; ++round) {
    uint64_t p0 = uint64_t(kPhiloxM0) * x[0];
    uint64_t p1 = uint64_t(kPhiloxM1) * x[2];
    x = {uint32_t(p1 >> 32) ^ x[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ x[3] ^ key[1],
         uint32_t(p0)};
    key[0] += kPhiloxW0;
    key[1] += kPhiloxW1;
  }
  return x;
}

// Scalar reference of the 16 random bits element `index` draws (see the header comment).
inline uint32_t philoxBits16(uint64_t seed, uint64_t offset, uint64_t index) {
  uint64_t c = 8 * (index / 64) + index % 8;
  PhiloxCounter out =
      philox4x32({uint32_t(c), uint32_t(c >> 32), uint32_t(offset), uint32_t(offset >> 32)},
                 {uint32_t(seed), uint32_t(seed >> 32)});
  uint32_t word = out[(index % 64) / 16];
  return (index / 8) % 2 == 0 ? (word & 0xFFFFu) : (word >> 16);
}

// Eight Philox evaluations at once, one per 32-bit lane, with the round keys of one
// (seed) precomputed.
class PhiloxAvx2 {
 public:
  PhiloxAvx2(uint64_t seed, uint64_t offset) {
    uint32_t k0 = uint32_t(seed);
    uint32_t k1 = uint32_t(seed >> 32);
    for (int round = 0; round < kPhiloxRounds; ++round) {
      key0_[round] = _mm256_set1_epi32(int(k0));
      key1_[round] = _mm256_set1_epi32(int(k1));
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    offset_lo_ = _mm256_set1_epi32(int(uint32_t(offset)));
    offset_hi_ = _mm256_set1_epi32(int(uint32_t(offset >> 32)));
  }

  // The uniforms in [0, 1) (multiples of 2^-16) of elements 64*first .. 64*(first+G)-1.
  // Each Philox round depends on the previous one, so a single evaluation is bound by
  // the multiply latency; G independent groups interleaved keep the vector units busy.
  template <int G>
  void uniforms(uint64_t first, float* u) const {
    const __m256i m0 = _mm256_set1_epi32(int(kPhiloxM0));
    const __m256i m1 = _mm256_set1_epi32(int(kPhiloxM1));
    __m256i x0[G], x1[G], x2[G], x3[G];
    for (int g = 0; g < G; ++g) {
      uint64_t c = 8 * (first + g);
      x0[g] = _mm256_add_epi32(_mm256_set1_epi32(int(uint32_t(c))),
                               _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      x1[g] = _mm256_set1_epi32(int(uint32_t(c >> 32)));
      x2[g] = offset_lo_;
      x3[g] = offset_hi_;
    }
    for (int round = 0; round < kPhiloxRounds; ++round) {
      for (int g = 0; g < G; ++g) {
        __m256i hi0, lo0, hi1, lo1;
        mulhilo(x0[g], m0, hi0, lo0);
        mulhilo(x2[g], m1, hi1, lo1);
        x0[g] = _mm256_xor_si256(_mm256_xor_si256(hi1, x1[g]), key0_[round]);
        x1[g] = lo1;
        x2[g] = _mm256_xor_si256(_mm256_xor_si256(hi0, x3[g]), key1_[round]);
        x3[g] = lo0;
      }
    }
    const __m256i low16 = _mm256_set1_epi32(0xFFFF);
    const __m256 scale = _mm256_set1_ps(1.0f / 65536.0f);
    for (int g = 0; g < G; ++g) {
      const __m256i words[4] = {x0[g], x1[g], x2[g], x3[g]};
      float* out = u + 64 * g;
      for (int w = 0; w < 4; ++w) {
        __m256i lo = _mm256_and_si256(words[w], low16);
        __m256i hi = _mm256_srli_epi32(words[w], 16);
        _mm256_storeu_ps(out + 16 * w, _mm256_mul_ps(_mm256_cvtepi32_ps(lo), scale));
        _mm256_storeu_ps(out + 16 * w + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(hi), scale));
      }
    }
  }

 private:
  // 32 x 32 -> 64-bit products of the eight lanes, split into high and low words.
  static void mulhilo(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
    __m256i even = _mm256_mul_epu32(a, m);
    __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
    hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  }

  __m256i key0_[kPhiloxRounds];
  __m256i key1_[kPhiloxRounds];
  __m256i offset_lo_;
  __m256i offset_hi_;
};

}  // namespace pgq::kernels
