#include "kernels/philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "kernels/sr_noise.h"

namespace pgq::kernels {
namespace {

// Known-answer vectors of Philox4x32-10 from Random123's kat_vectors.
TEST(Philox, KnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(
      philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
      (PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(
      philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
      (PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, VectorMatchesScalarMapping) {
  for (uint64_t seed : {uint64_t(0), uint64_t(42), uint64_t(0x123456789abcdefULL)}) {
    for (uint64_t offset : {uint64_t(0), uint64_t(7), uint64_t(1) << 40}) {
      PhiloxAvx2 gen(seed, offset);
      for (uint64_t group : {uint64_t(0), uint64_t(1), uint64_t(12345), (uint64_t(1) << 33) + 5}) {
        alignas(32) float u[3 * 64];
        gen.uniforms<3>(group, u);
        for (int i = 0; i < 3 * 64; ++i) {
          uint64_t index = group * 64 + i;
          EXPECT_EQ(u[i], float(philoxBits16(seed, offset, index)) / 65536.0f)
              << "seed " << seed << " offset " << offset << " index " << index;
        }
      }
    }
  }
}

TEST(Philox, Bits16AreSpread) {
  // 4096 draws of 16 bits: a sound generator repeats few values and hits both halves.
  std::set<uint32_t> seen;
  int high = 0;
  for (uint64_t i = 0; i < 4096; ++i) {
    uint32_t bits = philoxBits16(1, 0, i);
    seen.insert(bits);
    high += bits >= 32768;
  }
  EXPECT_GT(seen.size(), 3900u);  // ~4096 * (1 - 4096/131072) expected
  EXPECT_NEAR(high, 2048, 5 * 32);
}

// ---- The noise of stochastic rounding: ARS-5 (kernels/sr_noise.h).

// Known-answer vectors of ARS from Random123's kat_vectors (ars4x32 with 7 and 10 rounds:
// the round function and key schedule are the same for every round count).
TEST(SrNoise, ArsKnownAnswers) {
  struct Kat {
    int rounds;
    ArsBlock ctr, key, expected;
  };
  const Kat kats[] = {
      {7,
       {1, 0, 0, 0},
       {0, 0, 0x80000000u, 0},
       {0x50ee6f9fu, 0xb145d6ffu, 0x04c3488cu, 0x77cd209fu}},
      {7,
       {0x886a3f24u, 0xd308a385u, 0x2e8a1913u, 0x44737003u},
       {0, 0, 0, 0xffu},
       {0x09a2917cu, 0x81643036u, 0x7d18cdafu, 0xb286a87cu}},
      {7,
       {0xe6212845u, 0x7713d038u, 0xcf6654beu, 0x6c0ce934u},
       {0, 0, 0xff000000u, 0},
       {0x6e492fd4u, 0x5de1d3f5u, 0x082d2ff3u, 0x0c00136au}},
      {10,
       {0x886a3f24u, 0xd308a385u, 0x2e8a1913u, 0x44737003u},
       {0, 0, 0, 0x00800000u},
       {0xe6c0191du, 0x261dcebcu, 0xd41bbe82u, 0x8e6e9730u}},
      {10,
       {1, 0, 0, 0},
       {0, 0, 0, 0xff000000u},
       {0x27b00d10u, 0x76eeb5feu, 0x30fea418u, 0x02742412u}},
  };
  for (const Kat& kat : kats) {
    EXPECT_EQ(ars4x32(kat.ctr, kat.key, kat.rounds), kat.expected) << kat.rounds << " rounds";
  }
  EXPECT_THROW(ars4x32({}, {}, 0), std::invalid_argument);
  EXPECT_THROW(ars4x32({}, {}, 11), std::invalid_argument);
}

// VAES, AES-NI and the portable AES round give the words of the documented mapping.
TEST(SrNoise, EveryImplementationMatchesTheScalarMapping) {
  int tested = 0;
  for (SrNoiseIsa isa : {SrNoiseIsa::kVaes, SrNoiseIsa::kAesNi, SrNoiseIsa::kPortable}) {
    if (!srNoiseIsaSupported(isa)) continue;
    ++tested;
    for (uint64_t seed : {uint64_t(0), uint64_t(42), uint64_t(0x123456789abcdefULL)}) {
      for (uint64_t offset : {uint64_t(0), uint64_t(7), uint64_t(1) << 40}) {
        SrNoise gen(seed, offset, isa);
        // Block 2g starts element 16g; 38 blocks = 16 + 16 + 6 (batch and remainder).
        for (uint64_t g : {uint64_t(0), uint64_t(3), uint64_t(12345), (uint64_t(1) << 33) + 5}) {
          std::vector<uint32_t> words(4 * 38);
          gen.fill(2 * g, 38, words.data());
          for (uint64_t j = 0; j < 38 * 8; ++j) {
            const uint64_t index = 16 * g + j;
            const uint32_t word = words[8 * (j / 16) + j % 8];
            const uint32_t bits = (j / 8) % 2 == 0 ? (word & 0xFFFFu) : (word >> 16);
            ASSERT_EQ(bits, srNoiseBits16(seed, offset, index))
                << srNoiseIsaName(isa) << " seed " << seed << " offset " << offset << " index "
                << index;
          }
        }
      }
    }
  }
  EXPECT_EQ(tested, 1 + int(srNoiseIsaSupported(SrNoiseIsa::kAesNi)) +
                        int(srNoiseIsaSupported(SrNoiseIsa::kVaes)));
  EXPECT_TRUE(srNoiseIsaSupported(srNoiseBestIsa()));
}

// Chi-square statistics of the 16-bit draws of 2^22 consecutive elements: byte values
// (low and high byte of each draw, 256 cells, 255 degrees of freedom: mean 255, sd 22.6)
// and the top nibbles of pairs of elements 1, 8 and 16 apart (neighbours in another
// word, the other half of the same word, and the next ARS evaluation; 255 degrees of
// freedom too). A sound generator lands within 5 sd of the mean; the bounds are fixed
// because the streams are deterministic.
TEST(SrNoise, BitsAreUniformAndNeighboursIndependent) {
  const int64_t n = int64_t(1) << 22;
  SrNoise gen(20240611, 3);
  std::vector<uint32_t> words(static_cast<size_t>(n / 2));
  gen.fill(0, int(n / 8), words.data());
  std::vector<uint32_t> bits(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t word = words[size_t(8 * (i / 16) + i % 8)];
    bits[size_t(i)] = (i / 8) % 2 == 0 ? (word & 0xFFFFu) : (word >> 16);
  }
  EXPECT_EQ(bits[12345], srNoiseBits16(20240611, 3, 12345));
  auto chiSquare = [](const std::vector<double>& counts) {
    double total = 0.0;
    for (double c : counts) total += c;
    const double expected = total / double(counts.size());
    double chi2 = 0.0;
    for (double c : counts) chi2 += (c - expected) * (c - expected) / expected;
    return chi2;
  };
  const double lo = 255.0 - 5.0 * 22.6, hi = 255.0 + 5.0 * 22.6;
  std::vector<double> low_bytes(256), high_bytes(256);
  for (uint32_t b : bits) {
    low_bytes[b & 0xFF] += 1;
    high_bytes[b >> 8] += 1;
  }
  EXPECT_GT(chiSquare(low_bytes), lo);
  EXPECT_LT(chiSquare(low_bytes), hi);
  EXPECT_GT(chiSquare(high_bytes), lo);
  EXPECT_LT(chiSquare(high_bytes), hi);
  for (int64_t lag : {1, 8, 16}) {
    std::vector<double> pairs(256);
    for (int64_t i = 0; i + lag < n; i += 2 * lag) {
      pairs[(bits[size_t(i)] >> 12) * 16 + (bits[size_t(i + lag)] >> 12)] += 1;
    }
    EXPECT_GT(chiSquare(pairs), lo) << "lag " << lag;
    EXPECT_LT(chiSquare(pairs), hi) << "lag " << lag;
  }
  // The mean of the uniforms u = bits / 2^16: 0.5 - 2^-17, sd 0.2887 / sqrt(n) = 1.4e-4.
  double sum = 0.0;
  for (uint32_t b : bits) sum += double(b) / 65536.0;
  EXPECT_NEAR(sum / double(n), 0.5 - 1.0 / 131072.0, 5.0 * 0.2887 / std::sqrt(double(n)));
}

}  // namespace
}  // namespace pgq::kernels
