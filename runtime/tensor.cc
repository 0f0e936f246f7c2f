#include "runtime/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace pgq {

std::byte* allocateBuffer(size_t bytes) {
  constexpr size_t kAlign = 64;
  size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign + kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return static_cast<std::byte*>(p) + kBufferOffset;
}

void freeBuffer(std::byte* p) {
  if (p) std::free(p - kBufferOffset);
}

Tensor::Tensor(TensorType type) : type_(std::move(type)), storage_(allocateBuffer(bytes())) {}

Tensor Tensor::clone() const {
  Tensor copy(type_);
  if (!empty()) std::memcpy(copy.raw(), raw(), bytes());
  return copy;
}

}  // namespace pgq
