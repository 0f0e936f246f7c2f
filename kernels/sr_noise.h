#pragma once
// The noise of stochastic rounding: ARS-5, the AES-round counter-based generator of
// Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC 2011),
// exactly as Random123's ars4x32_R(5, ctr, key) computes it:
//   v = ctr ^ k0;  v = aesenc(v, k_r) for r = 1..4;  out = aesenclast(v, k_5)
// with the round keys k_r = k0 + r * W (two 64-bit additions, W = (0x9E3779B97F4A7C15,
// 0xBB67AE8584CAA73B)). It is counter-based like Philox: the bits an element gets are a
// pure function of (seed, offset, element index), so they are reproducible for a seed and
// identical for any thread count or chunking. Element i of a tensor draws
//   block   = ARS-5(ctr = (c, offset) as two little-endian 64-bit halves, key = (seed, 0)),
//             c = 2 * (i / 16) + (i % 8) / 4
//   bits    = 16-bit half ((i / 8) % 2) of 32-bit word (i % 4) of the block
// i.e. the blocks of counters 0, 1, 2, ... concatenated form a stream of 32-bit words in
// which element i uses word 8 * (i / 16) + i % 8, low half for (i / 8) even, high half
// otherwise. One 256-bit VAES evaluation (two blocks) thus serves 16 consecutive elements.
//
// Why ARS-5 and not Philox4x32-10 (which stays the generator of runtime/): SR must cost at
// most 1.5x round-to-nearest (docs/PERFORMANCE.md, Quantizers). Philox needs ~45 vector
// instructions (10 rounds of 32x32->64-bit multiplies emulated on AVX2) per 256 bits; one
// AES round is one instruction (vaesenc, two 128-bit blocks per ymm on VAES CPUs), so ARS-5
// costs 6 instructions per 256 bits. Measured: SR/RTN 2.6-3.1x with Philox-10, 1.2-1.35x
// with ARS-5 (quant_bench); ARS-7 gave ~1.5x in a standalone loop, too close to the limit.
//
// Quality, stated honestly: the authors found no statistical flaw in ARS with 5 or more
// rounds: ARS-5 is "Crush-resistant" (passes TestU01 SmallCrush, Crush and BigCrush over
// many keys and counter patterns), and 5 is exactly that minimum. Random123's default is
// ARS-7, which keeps 2 rounds of safety margin; Philox4x32-10 keeps 3 over its minimum of
// 7. ARS-5 therefore has no published safety margin, which is a weaker argument than
// Philox4x32-10's (and a third-party BigCrush run of ARS at its default rounds,
// RandomNumbers.jl's, reported a marginal failure). The round function is AES's (full diffusion of every input bit after
// two rounds), but with 5 rounds and the additive key schedule it is not a cipher; 5-round
// AES has known secret-key structural distinguishers (e.g. Grassi, Rechberger and Ronjom,
// EUROCRYPT 2017) that need chosen sets of 2^32 structured inputs and count collisions in
// subspaces, a property that no rounding decision can express. For stochastic rounding
// what matters is that each element's 16 bits are uniform and independent of its
// neighbours', which the Crush batteries test far more sharply than training could.
//
// The generator runs with VAES (256-bit) where the CPU has it, else with AES-NI (128-bit),
// else with a portable software AES round: all three give identical bits (tested).
#include <immintrin.h>

#include <array>
#include <cstdint>

namespace pgq::kernels {

inline constexpr int kSrArsRounds = 5;

// 128 bits as four little-endian 32-bit words (Random123's r123array4x32 order).
using ArsBlock = std::array<uint32_t, 4>;

// Portable reference of Random123's ars4x32_R(rounds, ctr, key), 1 <= rounds <= 10,
// with a table-free software AES round. Slow; for tests and CPUs without AES-NI.
ArsBlock ars4x32(ArsBlock ctr, ArsBlock key, int rounds);

// Scalar reference of the 16 random bits element `index` draws (header comment).
uint32_t srNoiseBits16(uint64_t seed, uint64_t offset, uint64_t index);

// Which instructions run the generator.
enum class SrNoiseIsa { kVaes, kAesNi, kPortable };
bool srNoiseIsaSupported(SrNoiseIsa isa);
// The fastest supported implementation (detected once).
SrNoiseIsa srNoiseBestIsa();
const char* srNoiseIsaName(SrNoiseIsa isa);

// ARS-kSrArsRounds of the two blocks whose counters are the 128-bit halves of ctr, with
// the round keys broadcast to both halves (keys[0 .. kSrArsRounds]). Callers must be
// compiled for VAES too and run only where srNoiseIsaSupported(SrNoiseIsa::kVaes).
__attribute__((target("aes,vaes"), always_inline)) inline __m256i arsVaes(__m256i ctr,
                                                                         const __m256i* keys) {
  __m256i v = _mm256_xor_si256(ctr, keys[0]);
  for (int r = 1; r < kSrArsRounds; ++r) v = _mm256_aesenc_epi128(v, keys[r]);
  return _mm256_aesenclast_epi128(v, keys[kSrArsRounds]);
}

// The stream of words of one (seed, offset), evaluated many blocks at a time.
class SrNoise {
 public:
  explicit SrNoise(uint64_t seed, uint64_t offset, SrNoiseIsa isa = srNoiseBestIsa());

  // words[4 * j + w] = word w of the block of counter first + j, for j < blocks.
  // blocks must be even (the VAES path makes two blocks per instruction).
  void fill(uint64_t first, int blocks, uint32_t* words) const {
    fill_(*this, first, blocks, words);
  }

  // Round keys k_0 .. k_R as in the header comment.
  const ArsBlock& roundKey(int round) const { return keys_[round]; }
  uint64_t offset() const { return offset_; }
  SrNoiseIsa isa() const { return isa_; }

 private:
  using FillFn = void (*)(const SrNoise&, uint64_t, int, uint32_t*);
  alignas(16) ArsBlock keys_[kSrArsRounds + 1];
  uint64_t offset_;
  SrNoiseIsa isa_;
  FillFn fill_ = nullptr;
};

}  // namespace pgq::kernels
