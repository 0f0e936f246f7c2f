#include "kernels/philox.h"

#include <gtest/gtest.h>

#include <set>

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

}  // namespace
}  // namespace pgq::kernels
