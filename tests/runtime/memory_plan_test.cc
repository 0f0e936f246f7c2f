#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/memory_plan.h"

namespace pgq {
namespace {

size_t aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }

// The plan's definition checked directly: taking buffers largest first (ties in request
// order), each sits at the lowest 64-byte-aligned offset whose bytes no buffer placed
// before it and alive at the same time takes.
void expectLowestFreeOffsets(const std::vector<BufferRequest>& requests, const MemoryPlan& plan) {
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return requests[a].bytes > requests[b].bytes; });
  size_t arena = 0;
  for (size_t n = 0; n < order.size(); ++n) {
    const BufferRequest& r = requests[order[n]];
    size_t size = aligned(r.bytes);
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t m = 0; m < n; ++m) {
      const BufferRequest& o = requests[order[m]];
      if (o.last >= r.first && r.last >= o.first)
        busy.emplace_back(plan.offsets[order[m]], plan.offsets[order[m]] + aligned(o.bytes));
    }
    auto free = [&](size_t at) {
      return std::none_of(busy.begin(), busy.end(), [&](auto b) { return at < b.second && b.first < at + size; });
    };
    size_t lowest = 0;
    if (size > 0)
      for (size_t at = 0; !free(at); at += 64) lowest = at + 64;
    ASSERT_EQ(plan.offsets[order[n]], lowest) << "buffer " << order[n] << " of " << requests.size();
    arena = std::max(arena, lowest + size);
  }
  EXPECT_EQ(plan.arena_bytes, arena);
}

TEST(MemoryPlan, PutsEachBufferAtTheLowestFreeOffset) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    int steps = 1 + static_cast<int>(rng() % 200);
    std::vector<BufferRequest> requests(1 + rng() % 300);
    for (BufferRequest& r : requests) {
      r.bytes = rng() % 4 == 0 ? rng() % 100 : 64 * (rng() % 8);  // empty and unaligned ones too
      r.first = static_cast<int>(rng() % static_cast<unsigned>(steps));
      // Mostly short lifetimes, some that span much of the graph (saved activations).
      int room = steps - r.first;
      r.last = r.first + static_cast<int>(rng() % static_cast<unsigned>(rng() % 4 == 0 ? room : std::min(4, room)));
    }
    expectLowestFreeOffsets(requests, planMemory(requests));
  }
}

// A training graph's shape: layer i's forward activation lives until layer i's backward,
// so every backward buffer meets every activation of the layers below it.
TEST(MemoryPlan, NestedLifetimesOfATrainingGraph) {
  const int layers = 64;
  std::vector<BufferRequest> requests;
  for (int i = 0; i < layers; ++i) {
    int forward = 2 * i, backward = 4 * layers - 2 * i;
    requests.push_back({4096, forward, backward});       // the saved activation
    requests.push_back({4096, forward, forward + 1});    // a forward temporary
    requests.push_back({4096, backward - 1, backward});  // a backward temporary
  }
  MemoryPlan plan = planMemory(requests);
  expectLowestFreeOffsets(requests, plan);
  EXPECT_EQ(plan.arena_bytes, (layers + 1) * 4096u);
}

}  // namespace
}  // namespace pgq
