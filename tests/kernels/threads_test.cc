#include "kernels/threads.h"

#include <omp.h>

#include <gtest/gtest.h>

namespace pgq::kernels {
namespace {

TEST(Threads, CgroupCpuMaxQuotaRoundsUpToWholeProcessors) {
  EXPECT_EQ(cpuQuotaFromCpuMax("200000 100000\n"), 2);
  EXPECT_EQ(cpuQuotaFromCpuMax("150000 100000\n"), 2);
  EXPECT_EQ(cpuQuotaFromCpuMax("50000 100000"), 1);
  EXPECT_EQ(cpuQuotaFromCpuMax("1 100000"), 1);
  EXPECT_EQ(cpuQuotaFromCpuMax("max 100000\n"), std::nullopt);
  EXPECT_EQ(cpuQuotaFromCpuMax(""), std::nullopt);
  EXPECT_EQ(cpuQuotaFromCpuMax("garbage"), std::nullopt);
  EXPECT_EQ(cpuQuotaFromCpuMax("100000 0"), std::nullopt);
}

TEST(Threads, DefaultCountSharesTheAvailableProcessorsBetweenRanks) {
  const int procs = availableProcessors();
  EXPECT_GE(procs, 1);
  EXPECT_LE(procs, omp_get_num_procs());
  EXPECT_EQ(defaultThreadCount(1), procs);
  EXPECT_EQ(defaultThreadCount(procs), 1);
  EXPECT_EQ(defaultThreadCount(procs * 4), 1);  // more ranks than processors: still one
  EXPECT_EQ(defaultThreadCount(0), procs);
}

}  // namespace
}  // namespace pgq::kernels
