// The Open MPI collectives (runtime/mpi.h), run by mpirun with N ranks:
//   mpirun -np N pgq_mpi_tests --tensor-parallel T
// Every rank runs every test, so every test calls the same collectives in the same
// order on every rank; checks that could differ between ranks use EXPECT, never ASSERT,
// so that a failing rank does not leave the others waiting in a collective.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/mpi.h"
#include "support/errors.h"

namespace pgq {

int g_tensor_parallel = 1;  // --tensor-parallel T; the training tests read it too

namespace {

// The world rank of member `index` of this process's group: tensor-parallel groups are
// T consecutive ranks, data-parallel groups take one rank in T.
int memberWorldRank(const Collectives& c, DeviceGroup group, int index) {
  const int t = g_tensor_parallel, r = c.worldRank();
  return group == DeviceGroup::kTensor ? (r / t) * t + index : index * t + r % t;
}

constexpr DeviceGroup kGroups[] = {DeviceGroup::kTensor, DeviceGroup::kData};

// Collectives that move everything in one call, and collectives limited to 3 elements
// (bytes) per call, which split every buffer here into pieces.
std::vector<std::unique_ptr<Collectives>> bothLimits() {
  std::vector<std::unique_ptr<Collectives>> result;
  result.push_back(makeMpiCollectives(g_tensor_parallel));
  result.push_back(makeMpiCollectives(g_tensor_parallel, 3));
  return result;
}

TEST(MpiCollectives, GroupsFollowTheRankLayout) {
  std::unique_ptr<Collectives> c = makeMpiCollectives(g_tensor_parallel);
  const int r = c->worldRank(), n = c->worldSize(), t = g_tensor_parallel;
  EXPECT_EQ(r, worldRankOrZero());
  EXPECT_EQ(n, std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
  EXPECT_EQ(c->rank(DeviceGroup::kTensor), r % t);
  EXPECT_EQ(c->size(DeviceGroup::kTensor), t);
  EXPECT_EQ(c->rank(DeviceGroup::kData), r / t);
  EXPECT_EQ(c->size(DeviceGroup::kData), n / t);
  EXPECT_EQ(c->localSize(), n);  // one machine
}

TEST(MpiCollectives, AllReduceSumsOverTheGroup) {
  for (auto& c : bothLimits()) {
    for (DeviceGroup group : kGroups) {
      std::vector<float> f(10);
      std::vector<double> d(7);
      for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(100 * c->worldRank() + i);
      for (size_t i = 0; i < d.size(); ++i) d[i] = 0.5 + c->worldRank() * 1e10 + static_cast<double>(i);
      c->allReduceSum(f.data(), static_cast<int64_t>(f.size()), group);
      c->allReduceSum(d.data(), static_cast<int64_t>(d.size()), group);
      for (size_t i = 0; i < f.size(); ++i) {
        float want_f = 0;
        double want_d = 0;
        for (int m = 0; m < c->size(group); ++m) {
          want_f += static_cast<float>(100 * memberWorldRank(*c, group, m) + i);
          want_d += 0.5 + memberWorldRank(*c, group, m) * 1e10 + static_cast<double>(i);
        }
        EXPECT_EQ(f[i], want_f) << "float element " << i << " over " << nameOf(group);
        if (i < d.size()) {
          EXPECT_EQ(d[i], want_d) << "double element " << i << " over " << nameOf(group);
        }
      }
    }
  }
}

TEST(MpiCollectives, AllGatherOrdersMembersByGroupRank) {
  for (auto& c : bothLimits()) {
    for (DeviceGroup group : kGroups) {
      const int64_t count = 7;
      std::vector<float> in(count);
      for (int64_t k = 0; k < count; ++k) in[k] = static_cast<float>(1000 * c->worldRank() + k);
      std::vector<float> out(static_cast<size_t>(c->size(group) * count), -1.f);
      c->allGather(in.data(), out.data(), count, group);
      for (int m = 0; m < c->size(group); ++m)
        for (int64_t k = 0; k < count; ++k)
          EXPECT_EQ(out[m * count + k], static_cast<float>(1000 * memberWorldRank(*c, group, m) + k))
              << "member " << m << " element " << k << " over " << nameOf(group);
    }
  }
}

TEST(MpiCollectives, ReduceScatterSumGivesEachMemberItsBlock) {
  for (auto& c : bothLimits()) {
    for (DeviceGroup group : kGroups) {
      const int64_t count = 5;
      const int members = c->size(group);
      std::vector<float> in(static_cast<size_t>(members * count));
      for (size_t j = 0; j < in.size(); ++j) in[j] = static_cast<float>(1000 * c->worldRank() + j);
      std::vector<float> out(count, -1.f);
      c->reduceScatterSum(in.data(), out.data(), count, group);
      const int64_t block = c->rank(group);
      for (int64_t k = 0; k < count; ++k) {
        float want = 0;
        for (int m = 0; m < members; ++m)
          want += static_cast<float>(1000 * memberWorldRank(*c, group, m) + block * count + k);
        EXPECT_EQ(out[k], want) << "element " << k << " over " << nameOf(group);
      }
    }
  }
}

TEST(MpiCollectives, BroadcastCopiesTheRootsBytesEverywhere) {
  std::unique_ptr<Collectives> c = makeMpiCollectives(g_tensor_parallel);
  const int root = c->worldSize() - 1;
  auto pattern = [](size_t i) { return static_cast<unsigned char>((i * 131 + 7) % 251); };
  std::vector<unsigned char> big(3 << 20, 0);  // 3 MiB: beyond Open MPI's eager limits
  if (c->worldRank() == root)
    for (size_t i = 0; i < big.size(); ++i) big[i] = pattern(i);
  c->broadcast(big.data(), static_cast<int64_t>(big.size()), root);
  size_t wrong = 0;
  for (size_t i = 0; i < big.size(); ++i) wrong += big[i] != pattern(i);
  EXPECT_EQ(wrong, 0u);

  std::unique_ptr<Collectives> pieces = makeMpiCollectives(g_tensor_parallel, 3);
  std::vector<unsigned char> small(100, 0);
  if (c->worldRank() == 0)
    for (size_t i = 0; i < small.size(); ++i) small[i] = pattern(i);
  pieces->broadcast(small.data(), static_cast<int64_t>(small.size()), 0);
  for (size_t i = 0; i < small.size(); ++i) EXPECT_EQ(small[i], pattern(i)) << "byte " << i;
}

// In a group, member 0's bytes reach the group's members and no others: an imported
// model's constants at tensor_parallel > 1 are each rank's part, shared by its replicas.
TEST(MpiCollectives, GroupBroadcastCopiesTheFirstMembersBytes) {
  for (const std::unique_ptr<Collectives>& c : bothLimits()) {
    for (DeviceGroup group : kGroups) {
      std::vector<int32_t> data(1000, c->worldRank());
      c->broadcast(data.data(), static_cast<int64_t>(data.size() * sizeof(int32_t)), group);
      const int first = memberWorldRank(*c, group, 0);
      EXPECT_EQ(std::count(data.begin(), data.end(), first), static_cast<long>(data.size()))
          << "rank " << c->worldRank() << " in " << nameOf(group) << " expected rank " << first << "'s bytes";
    }
  }
}

TEST(MpiCollectives, AllGatherStringsInWorldRankOrder) {
  std::unique_ptr<Collectives> c = makeMpiCollectives(g_tensor_parallel);
  // Rank 0's string is empty: lengths differ, down to zero.
  auto text = [](int rank) { return std::string(static_cast<size_t>(rank) * 3, static_cast<char>('a' + rank)); };
  std::vector<std::string> all = c->allGatherStrings(text(c->worldRank()));
  ASSERT_EQ(static_cast<int>(all.size()), c->worldSize());
  for (int r = 0; r < c->worldSize(); ++r) EXPECT_EQ(all[r], text(r)) << "rank " << r;
}

// The time is that spent inside the calls, in milliseconds: more than nothing, and no
// more than this rank's own clock saw around them.
TEST(MpiCollectives, StatsCountCallsAndBytes) {
  std::unique_ptr<Collectives> c = makeMpiCollectives(g_tensor_parallel);
  std::vector<float> f(10, 1.f);
  const auto start = std::chrono::steady_clock::now();
  c->allReduceSum(f.data(), 10, DeviceGroup::kData);
  c->barrier();
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(c->stats().calls, 2);
  EXPECT_EQ(c->stats().bytes, 40);
  EXPECT_GT(c->stats().ms, 0);
  EXPECT_LE(c->stats().ms, wall_ms);
  c->resetStats();
  EXPECT_EQ(c->stats().calls, 0);
  EXPECT_EQ(c->stats().ms, 0);
}

TEST(MpiCollectives, RefusesATensorParallelSizeThatDoesNotDivideTheRanks) {
  const int n = std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE"));
  const std::string expected = fmt::format("--tensor-parallel {} does not divide the {} ranks of this job (mpirun -np {})",
                                           n + 1, n, n);
  try {
    makeMpiCollectives(n + 1);
    ADD_FAILURE() << "--tensor-parallel " << n + 1 << " accepted with " << n << " ranks";
  } catch (const Error& e) {
    EXPECT_EQ(e.what(), expected);
  }
  EXPECT_THROW(makeMpiCollectives(0), Error);
}

// On ranks other than 0, only failures are printed, with the rank: gtest's full report
// once, from rank 0, is enough.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (result.failed())
      fmt::print(stderr, "[rank {}] {}:{}: failure\n{}\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace pgq

int main(int argc, char** argv) {
  pgq::MpiSession mpi = pgq::initMpiIfLaunched(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  if (!mpi.active() || argc != 3 || std::string(argv[1]) != "--tensor-parallel") {
    fmt::print(stderr, "usage: mpirun -np N {} --tensor-parallel T\n", argv[0]);
    return 2;
  }
  pgq::g_tensor_parallel = std::atoi(argv[2]);
  if (int rank = pgq::worldRankOrZero(); rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new pgq::RankFailurePrinter(rank));
  }
  return RUN_ALL_TESTS();
}
