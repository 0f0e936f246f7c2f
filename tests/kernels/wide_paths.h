#pragma once
// For tests that compare pgq's 512-bit kernel paths with the 256-bit ones they stand in
// for (kernels::avx512Kernels()): checks that the paths are on exactly where the CPU has
// AVX-512 F, BW and VL, turns them on (which must leave them off without AVX-512), and
// turns them back on at the end of the scope, whatever the test switched.
#include <gtest/gtest.h>

#include "kernels/cpu_isa.h"

namespace pgq::kernels::testing {

class WidePaths {
 public:
  WidePaths()
      : cpu_(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl")) {
    EXPECT_EQ(avx512Kernels(), cpu_) << "the 512-bit paths' detection does not follow the CPU";
    setAvx512Kernels(true);
    EXPECT_EQ(avx512Kernels(), cpu_) << "the switch turned on a path this CPU does not have";
  }
  ~WidePaths() { setAvx512Kernels(true); }
  WidePaths(const WidePaths&) = delete;
  WidePaths& operator=(const WidePaths&) = delete;

  // Whether there is a 512-bit path to compare (else the 256-bit one is the only one).
  bool available() const { return cpu_ && avx512Kernels(); }

 private:
  bool cpu_;
};

}  // namespace pgq::kernels::testing
