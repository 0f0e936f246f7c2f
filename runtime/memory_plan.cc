#include "runtime/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace pgq {
namespace {

constexpr size_t kAlign = 64;
size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

MemoryPlan planMemory(std::span<const BufferRequest> requests) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return requests[a].bytes > requests[b].bytes; });
  std::vector<size_t> placed;
  for (size_t i : order) {
    const BufferRequest& r = requests[i];
    size_t size = alignUp(r.bytes);
    // Intervals already taken by buffers alive at the same time, by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t j : placed) {
      const BufferRequest& o = requests[j];
      if (o.last < r.first || r.last < o.first) continue;
      busy.emplace_back(plan.offsets[j], plan.offsets[j] + alignUp(o.bytes));
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + size <= begin) break;
      offset = std::max(offset, end);
    }
    plan.offsets[i] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
    placed.push_back(i);
  }
  return plan;
}

}  // namespace pgq
