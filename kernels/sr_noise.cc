#include "kernels/sr_noise.h"

#include <cpuid.h>
#include <immintrin.h>

#include "kernels/kernel_error.h"

namespace pgq::kernels {
namespace {

constexpr uint64_t kWeyl0 = 0x9E3779B97F4A7C15ULL;  // golden ratio
constexpr uint64_t kWeyl1 = 0xBB67AE8584CAA73BULL;  // sqrt(3) - 1

// ---- Portable AES round (FIPS-197), bytes in the order AES-NI keeps them in an xmm
// register: byte r + 4c is row r of column c.

constexpr uint8_t xtime(uint8_t a) { return uint8_t((a << 1) ^ ((a & 0x80) ? 0x1B : 0x00)); }

constexpr uint8_t gfMul(uint8_t a, uint8_t b) {
  uint8_t p = 0;
  for (int i = 0; i < 8; ++i) {
    if (b & 1) p ^= a;
    a = xtime(a);
    b >>= 1;
  }
  return p;
}

constexpr uint8_t rotl8(uint8_t b, int s) { return uint8_t((b << s) | (b >> (8 - s))); }

// The S-box from its definition (multiplicative inverse in GF(2^8), then the affine map),
// so no 256-entry table has to be typed in; the tests check it through known answers.
struct SBox {
  uint8_t s[256] = {};
  constexpr SBox() {
    for (int x = 0; x < 256; ++x) {
      uint8_t inv = 0;
      if (x != 0) {
        // x^254 = x^-1 in GF(2^8).
        uint8_t result = 1;
        uint8_t base = uint8_t(x);
        for (int e = 254; e > 0; e >>= 1) {
          if (e & 1) result = gfMul(result, base);
          base = gfMul(base, base);
        }
        inv = result;
      }
      s[x] = uint8_t(inv ^ rotl8(inv, 1) ^ rotl8(inv, 2) ^ rotl8(inv, 3) ^ rotl8(inv, 4) ^ 0x63);
    }
  }
};
constexpr SBox kSBox;
static_assert(kSBox.s[0x00] == 0x63 && kSBox.s[0x01] == 0x7C && kSBox.s[0x53] == 0xED);

using Bytes = std::array<uint8_t, 16>;

Bytes toBytes(const ArsBlock& b) {
  Bytes out{};
  for (int i = 0; i < 16; ++i) out[i] = uint8_t(b[i / 4] >> (8 * (i % 4)));
  return out;
}

ArsBlock toBlock(const Bytes& b) {
  ArsBlock out{};
  for (int i = 0; i < 16; ++i) out[i / 4] |= uint32_t(b[i]) << (8 * (i % 4));
  return out;
}

// aesenc (mix = true) or aesenclast (mix = false): SubBytes, ShiftRows, [MixColumns],
// AddRoundKey.
Bytes aesRound(const Bytes& in, const Bytes& key, bool mix) {
  Bytes s{};
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 4; ++c) s[r + 4 * c] = kSBox.s[in[r + 4 * ((c + r) % 4)]];
  }
  if (mix) {
    for (int c = 0; c < 4; ++c) {
      const uint8_t a0 = s[4 * c], a1 = s[4 * c + 1], a2 = s[4 * c + 2], a3 = s[4 * c + 3];
      s[4 * c] = uint8_t(gfMul(a0, 2) ^ gfMul(a1, 3) ^ a2 ^ a3);
      s[4 * c + 1] = uint8_t(a0 ^ gfMul(a1, 2) ^ gfMul(a2, 3) ^ a3);
      s[4 * c + 2] = uint8_t(a0 ^ a1 ^ gfMul(a2, 2) ^ gfMul(a3, 3));
      s[4 * c + 3] = uint8_t(gfMul(a0, 3) ^ a1 ^ a2 ^ gfMul(a3, 2));
    }
  }
  for (int i = 0; i < 16; ++i) s[i] ^= key[i];
  return s;
}

// k + W with two 64-bit additions (the ARS key schedule).
ArsBlock addWeyl(const ArsBlock& k) {
  uint64_t lo = (uint64_t(k[1]) << 32 | k[0]) + kWeyl0;
  uint64_t hi = (uint64_t(k[3]) << 32 | k[2]) + kWeyl1;
  return {uint32_t(lo), uint32_t(lo >> 32), uint32_t(hi), uint32_t(hi >> 32)};
}

ArsBlock counterBlock(uint64_t c, uint64_t offset) {
  return {uint32_t(c), uint32_t(c >> 32), uint32_t(offset), uint32_t(offset >> 32)};
}

// The rounds of ARS-R after the initial whitening, with precomputed round keys.
ArsBlock arsWithKeys(const ArsBlock& ctr, const ArsBlock* keys, int rounds) {
  Bytes v = toBytes(ctr);
  const Bytes k0 = toBytes(keys[0]);
  for (int i = 0; i < 16; ++i) v[i] ^= k0[i];
  for (int r = 1; r <= rounds; ++r) v = aesRound(v, toBytes(keys[r]), r < rounds);
  return toBlock(v);
}

void fillPortable(const SrNoise& g, uint64_t first, int blocks, uint32_t* words) {
  ArsBlock keys[kSrArsRounds + 1];
  for (int r = 0; r <= kSrArsRounds; ++r) keys[r] = g.roundKey(r);
  for (int j = 0; j < blocks; ++j) {
    ArsBlock out = arsWithKeys(counterBlock(first + uint64_t(j), g.offset()), keys, kSrArsRounds);
    for (int w = 0; w < 4; ++w) words[4 * j + w] = out[w];
  }
}

// ---- AES-NI: one block per xmm register. Eight independent blocks are interleaved
// because each round depends on the previous one (aesenc latency ~4 cycles).
__attribute__((target("aes"))) void fillAesNi(const SrNoise& g, uint64_t first, int blocks,
                                               uint32_t* words) {
  __m128i k[kSrArsRounds + 1];
  for (int r = 0; r <= kSrArsRounds; ++r) {
    k[r] = _mm_load_si128(reinterpret_cast<const __m128i*>(g.roundKey(r).data()));
  }
  const __m128i one = _mm_set_epi64x(0, 1);
  __m128i ctr = _mm_set_epi64x(int64_t(g.offset()), int64_t(first));
  int j = 0;
  constexpr int kBatch = 8;
  for (; j + kBatch <= blocks; j += kBatch) {
    __m128i v[kBatch];
    for (int b = 0; b < kBatch; ++b) {
      v[b] = _mm_xor_si128(ctr, k[0]);
      ctr = _mm_add_epi64(ctr, one);
    }
    for (int r = 1; r < kSrArsRounds; ++r) {
      for (int b = 0; b < kBatch; ++b) v[b] = _mm_aesenc_si128(v[b], k[r]);
    }
    for (int b = 0; b < kBatch; ++b) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(words + 4 * (j + b)),
                       _mm_aesenclast_si128(v[b], k[kSrArsRounds]));
    }
  }
  for (; j < blocks; ++j) {
    __m128i v = _mm_xor_si128(ctr, k[0]);
    for (int r = 1; r < kSrArsRounds; ++r) v = _mm_aesenc_si128(v, k[r]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(words + 4 * j),
                     _mm_aesenclast_si128(v, k[kSrArsRounds]));
    ctr = _mm_add_epi64(ctr, one);
  }
}

// ---- VAES: two blocks (counters c, c + 1) per ymm register, eight registers at a time.
__attribute__((target("aes,vaes"))) void fillVaes(const SrNoise& g, uint64_t first, int blocks,
                                                   uint32_t* words) {
  __m256i k[kSrArsRounds + 1];
  for (int r = 0; r <= kSrArsRounds; ++r) {
    k[r] = _mm256_broadcastsi128_si256(
        _mm_load_si128(reinterpret_cast<const __m128i*>(g.roundKey(r).data())));
  }
  const __m256i two = _mm256_set_epi64x(0, 2, 0, 2);
  const int64_t off = int64_t(g.offset());
  __m256i ctr = _mm256_set_epi64x(off, int64_t(first + 1), off, int64_t(first));
  int j = 0;
  constexpr int kBatch = 8;  // 16 blocks
  for (; j + 2 * kBatch <= blocks; j += 2 * kBatch) {
    __m256i v[kBatch];
    for (int b = 0; b < kBatch; ++b) {
      v[b] = _mm256_xor_si256(ctr, k[0]);
      ctr = _mm256_add_epi64(ctr, two);
    }
    for (int r = 1; r < kSrArsRounds; ++r) {
      for (int b = 0; b < kBatch; ++b) v[b] = _mm256_aesenc_epi128(v[b], k[r]);
    }
    for (int b = 0; b < kBatch; ++b) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + 4 * j + 8 * b),
                          _mm256_aesenclast_epi128(v[b], k[kSrArsRounds]));
    }
  }
  for (; j < blocks; j += 2) {
    __m256i v = _mm256_xor_si256(ctr, k[0]);
    for (int r = 1; r < kSrArsRounds; ++r) v = _mm256_aesenc_epi128(v, k[r]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + 4 * j),
                        _mm256_aesenclast_epi128(v, k[kSrArsRounds]));
    ctr = _mm256_add_epi64(ctr, two);
  }
}

}  // namespace

ArsBlock ars4x32(ArsBlock ctr, ArsBlock key, int rounds) {
  if (rounds < 1 || rounds > 10) {
    throw KernelError::format("ars4x32: rounds must be in [1, 10], got {}", rounds);
  }
  ArsBlock keys[11];
  keys[0] = key;
  for (int r = 1; r <= rounds; ++r) keys[r] = addWeyl(keys[r - 1]);
  return arsWithKeys(ctr, keys, rounds);
}

uint32_t srNoiseBits16(uint64_t seed, uint64_t offset, uint64_t index) {
  const uint64_t c = 2 * (index / 16) + (index % 8) / 4;
  const ArsBlock out = ars4x32(counterBlock(c, offset),
                               {uint32_t(seed), uint32_t(seed >> 32), 0u, 0u}, kSrArsRounds);
  const uint32_t word = out[index % 4];
  return (index / 8) % 2 == 0 ? (word & 0xFFFFu) : (word >> 16);
}

namespace {
// The CPU features the noise kernels need, read once per process. CPUID traps to the
// hypervisor in a virtual machine (microseconds a call): reading it on every SrNoise
// construction, i.e. every quantize call, once cut the quantizer 8x
// (bench/perf_smoke.cc now trips on such a regression).
struct NoiseCpuFeatures {
  bool aes = false;
  bool avx2 = false;
  bool vaes = false;
};

// VAES is CPUID leaf 7, ECX bit 9, read directly because clang 14 (Debian 12, used for
// the fuzz build) does not know "vaes" in __builtin_cpu_supports.
const NoiseCpuFeatures& noiseCpuFeatures() {
  static const NoiseCpuFeatures features = [] {
    __builtin_cpu_init();
    NoiseCpuFeatures f;
    f.aes = __builtin_cpu_supports("aes");
    f.avx2 = __builtin_cpu_supports("avx2");
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    f.vaes = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 9)) != 0;
    return f;
  }();
  return features;
}
}  // namespace

bool srNoiseIsaSupported(SrNoiseIsa isa) {
  const NoiseCpuFeatures& f = noiseCpuFeatures();
  switch (isa) {
    case SrNoiseIsa::kVaes: return f.vaes && f.aes && f.avx2;
    case SrNoiseIsa::kAesNi: return f.aes;
    case SrNoiseIsa::kPortable: return true;
  }
  return false;
}

SrNoiseIsa srNoiseBestIsa() {
  static const SrNoiseIsa best = [] {
    for (SrNoiseIsa isa : {SrNoiseIsa::kVaes, SrNoiseIsa::kAesNi}) {
      if (srNoiseIsaSupported(isa)) return isa;
    }
    return SrNoiseIsa::kPortable;
  }();
  return best;
}

const char* srNoiseIsaName(SrNoiseIsa isa) {
  switch (isa) {
    case SrNoiseIsa::kVaes: return "vaes";
    case SrNoiseIsa::kAesNi: return "aes-ni";
    case SrNoiseIsa::kPortable: return "portable";
  }
  return "?";
}

SrNoise::SrNoise(uint64_t seed, uint64_t offset, SrNoiseIsa isa) : offset_(offset), isa_(isa) {
  if (!srNoiseIsaSupported(isa)) {
    throw KernelError::format("SrNoise: this CPU does not support the {} implementation",
                              srNoiseIsaName(isa));
  }
  keys_[0] = {uint32_t(seed), uint32_t(seed >> 32), 0u, 0u};
  for (int r = 1; r <= kSrArsRounds; ++r) keys_[r] = addWeyl(keys_[r - 1]);
  switch (isa) {
    case SrNoiseIsa::kVaes: fill_ = fillVaes; break;
    case SrNoiseIsa::kAesNi: fill_ = fillAesNi; break;
    case SrNoiseIsa::kPortable: fill_ = fillPortable; break;
  }
}

}  // namespace pgq::kernels
