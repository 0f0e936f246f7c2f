#include "runtime/memory_plan.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "support/errors.h"

namespace pgq {
namespace {

constexpr size_t kAlign = 64;
size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// A union of byte ranges [begin, end), kept merged: begin -> end.
class ByteRuns {
 public:
  void add(size_t begin, size_t end) {
    auto it = runs_.upper_bound(begin);
    if (it != runs_.begin() && std::prev(it)->second >= begin) {
      --it;
      begin = it->first;
    }
    while (it != runs_.end() && it->first <= end) {
      end = std::max(end, it->second);
      it = runs_.erase(it);
    }
    runs_.emplace_hint(it, begin, end);
  }

  // The lowest offset >= `x` where `size` (> 0) bytes are outside every run.
  size_t fit(size_t x, size_t size) const {
    auto it = runs_.upper_bound(x);
    if (it != runs_.begin() && std::prev(it)->second > x) x = std::prev(it)->second;
    for (; it != runs_.end() && it->first < x + size; ++it) x = it->second;
    return x;
  }

  bool empty() const { return runs_.empty(); }

 private:
  std::map<size_t, size_t> runs_;
};

// The bytes taken by placed buffers, by step: a segment tree over the steps. A buffer
// alive in steps [first, last] is recorded at the O(log steps) nodes whose ranges tile
// [first, last] (in their `cover`) and at those nodes and all their ancestors (in their
// `sub`). The buffers alive at some step of a query's range are then exactly the
// `cover` of the nodes the query passes through and the `sub` of the nodes that tile
// it, so a query looks at O(log steps) sets instead of every placed buffer.
class BusyBytes {
 public:
  explicit BusyBytes(int steps) : steps_(steps), cover_(4 * static_cast<size_t>(steps)), sub_(cover_.size()) {}

  void add(int first, int last, size_t begin, size_t end) { add(1, 0, steps_ - 1, first, last, begin, end); }

  // The lowest offset where `size` (> 0) bytes are free in every step of [first, last].
  size_t lowestFit(int first, int last, size_t size) {
    sets_.clear();
    collect(1, 0, steps_ - 1, first, last);
    // Each set moves the offset up to its own next fit; an offset that no set moves in
    // a full round is free in all of them. No offset below it was free: every move
    // skipped only bytes busy in one set.
    size_t offset = 0;
    for (size_t k = 0, unmoved = 0; unmoved < sets_.size(); k = (k + 1) % sets_.size()) {
      size_t next = sets_[k]->fit(offset, size);
      unmoved = next == offset ? unmoved + 1 : 1;
      offset = next;
    }
    return offset;
  }

 private:
  void add(size_t node, int lo, int hi, int first, int last, size_t begin, size_t end) {
    sub_[node].add(begin, end);
    if (first <= lo && hi <= last) {
      cover_[node].add(begin, end);
      return;
    }
    int mid = lo + (hi - lo) / 2;
    if (first <= mid) add(2 * node, lo, mid, first, last, begin, end);
    if (last > mid) add(2 * node + 1, mid + 1, hi, first, last, begin, end);
  }

  void collect(size_t node, int lo, int hi, int first, int last) {
    if (first <= lo && hi <= last) {
      if (!sub_[node].empty()) sets_.push_back(&sub_[node]);
      return;
    }
    if (!cover_[node].empty()) sets_.push_back(&cover_[node]);
    int mid = lo + (hi - lo) / 2;
    if (first <= mid) collect(2 * node, lo, mid, first, last);
    if (last > mid) collect(2 * node + 1, mid + 1, hi, first, last);
  }

  int steps_;
  std::vector<ByteRuns> cover_;  // buffers alive in every step of the node's range
  std::vector<ByteRuns> sub_;    // buffers alive in some step of the node's range
  std::vector<const ByteRuns*> sets_;
};

}  // namespace

MemoryPlan planMemory(std::span<const BufferRequest> requests) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  int steps = 1;
  for (const BufferRequest& r : requests) {
    PGQ_ASSERT(0 <= r.first && r.first <= r.last, "buffer lifetime [{}, {}] is empty", r.first, r.last);
    steps = std::max(steps, r.last + 1);
  }
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return requests[a].bytes > requests[b].bytes; });
  // Each buffer goes at the lowest offset that no placed buffer alive at the same time
  // takes. Comparing it with every placed buffer made this quadratic: a training graph
  // keeps the forward activations of every layer alive until the backward reaches
  // them, so a backward buffer met O(layers) live ones.
  BusyBytes busy(steps);
  for (size_t i : order) {
    const BufferRequest& r = requests[i];
    size_t size = alignUp(r.bytes);
    if (size == 0) continue;  // an empty buffer takes no bytes: offset 0
    size_t offset = busy.lowestFit(r.first, r.last, size);
    busy.add(r.first, r.last, offset, offset + size);
    plan.offsets[i] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
  }
  return plan;
}

}  // namespace pgq
