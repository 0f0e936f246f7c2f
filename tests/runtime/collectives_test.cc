#include "runtime/collectives.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "runtime/mpi.h"

namespace pgq {
namespace {

TEST(LocalCollectives, EveryGroupIsThisProcessAlone) {
  std::unique_ptr<Collectives> c = makeLocalCollectives();
  EXPECT_EQ(c->worldRank(), 0);
  EXPECT_EQ(c->worldSize(), 1);
  EXPECT_EQ(c->localSize(), 1);
  for (DeviceGroup group : {DeviceGroup::kTensor, DeviceGroup::kData}) {
    EXPECT_EQ(c->rank(group), 0);
    EXPECT_EQ(c->size(group), 1);
  }
}

TEST(LocalCollectives, SumsAreTheDataAndGathersAreCopies) {
  std::unique_ptr<Collectives> c = makeLocalCollectives();
  std::vector<float> f{1.5f, -2.f, 3.f};
  c->allReduceSum(f.data(), 3, DeviceGroup::kData);
  EXPECT_EQ(f, (std::vector<float>{1.5f, -2.f, 3.f}));
  std::vector<double> d{0.25, 1e300};
  c->allReduceSum(d.data(), 2, DeviceGroup::kTensor);
  EXPECT_EQ(d, (std::vector<double>{0.25, 1e300}));

  std::vector<float> gathered(3, 0.f);
  c->allGather(f.data(), gathered.data(), 3, DeviceGroup::kTensor);
  EXPECT_EQ(gathered, f);
  std::vector<float> scattered(3, 0.f);
  c->reduceScatterSum(f.data(), scattered.data(), 3, DeviceGroup::kData);
  EXPECT_EQ(scattered, f);

  std::vector<char> bytes{'a', 'b'};
  c->broadcast(bytes.data(), 2, 0);
  EXPECT_EQ(bytes, (std::vector<char>{'a', 'b'}));
  EXPECT_EQ(c->allGatherStrings("rank zero"), std::vector<std::string>{"rank zero"});
  c->barrier();
}

TEST(LocalCollectives, StatsCountCallsAndBytes) {
  std::unique_ptr<Collectives> c = makeLocalCollectives();
  std::vector<float> f(10, 1.f), out(10);
  std::vector<double> d(4, 1.0);
  c->allReduceSum(f.data(), 10, DeviceGroup::kData);    // 40 bytes
  c->allReduceSum(d.data(), 4, DeviceGroup::kData);     // 32
  c->allGather(f.data(), out.data(), 10, DeviceGroup::kTensor);  // 40
  c->reduceScatterSum(f.data(), out.data(), 10, DeviceGroup::kTensor);  // 40
  c->broadcast(out.data(), 7, 0);                       // 7
  c->allGatherStrings("abc");                           // 3
  c->barrier();                                         // 0
  EXPECT_EQ(c->stats().calls, 7);
  EXPECT_EQ(c->stats().bytes, 162);
  c->resetStats();
  EXPECT_EQ(c->stats().calls, 0);
  EXPECT_EQ(c->stats().bytes, 0);
  EXPECT_EQ(c->stats().ms, 0);
}

// The time is that spent inside the calls, in milliseconds: more than nothing for a
// gather that copies 64 MB, and no more than the test's own clock saw around them.
TEST(LocalCollectives, StatsTimeTheCalls) {
  std::unique_ptr<Collectives> c = makeLocalCollectives();
  std::vector<float> big(size_t{16} << 20, 1.f), out(big.size());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) c->allGather(big.data(), out.data(), static_cast<int64_t>(big.size()), DeviceGroup::kTensor);
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(out, big);
  EXPECT_EQ(c->stats().calls, 3);
  EXPECT_EQ(c->stats().bytes, 3 * 64.0 * (1 << 20));
  EXPECT_GT(c->stats().ms, 0);
  EXPECT_LE(c->stats().ms, wall_ms);
}

// Without mpirun pgq is one process and never starts MPI.
TEST(Mpi, WithoutMpirunNothingStarts) {
  // ctest runs this binary without mpirun; started by hand under mpirun, the premise of
  // the test does not hold (tests/mpi/ covers that case).
  if (launchedByMpirun()) GTEST_SKIP() << "started by mpirun: the test is about running without it";
  int argc = 1;
  char name[] = "test";
  char* args[] = {name, nullptr};
  char** argv = args;
  MpiSession session = initMpiIfLaunched(&argc, &argv);
  EXPECT_FALSE(session.active());
  EXPECT_FALSE(mpiActive());
  EXPECT_EQ(worldRankOrZero(), 0);
}

}  // namespace
}  // namespace pgq
