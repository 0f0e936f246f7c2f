#pragma once
// Offsets for temporary buffers in one arena: two buffers whose lifetimes overlap
// never share bytes; otherwise memory is reused. Greedy by size (largest first, at
// the lowest offset that fits), as TFLite's arena planner does.
#include <cstddef>
#include <span>
#include <vector>

namespace pgq {

struct BufferRequest {
  size_t bytes = 0;
  int first = 0;  // first step that writes or reads it
  int last = 0;   // last step that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // one per request, 64-byte aligned
  size_t arena_bytes = 0;
};

MemoryPlan planMemory(std::span<const BufferRequest> requests);

}  // namespace pgq
