#pragma once
// A dense, row-major tensor owned by the runtime (parameters, optimizer state,
// batches, graph outputs). Its type is the IR's TensorType. Storage comes from
// allocateBuffer (see there for its alignment).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "ir/node.h"
#include "support/errors.h"

namespace pgq {

// Every runtime buffer (tensors and the executor's arena, whose slots sit at multiples
// of 64 bytes) starts kBufferOffset bytes past a 64-byte boundary. oneDNN 2.6's f32
// gemm:jit picks a much slower kernel for weight-gradient shapes when B is 32-byte
// aligned: [256,2048]x[2048,1024] runs at 43 GFLOP/s with B aligned and 78 with B
// 16 bytes off (docs/PERFORMANCE.md, "Buffer alignment"). pgq's own kernels use
// unaligned loads, so the offset costs them nothing measurable.
inline constexpr size_t kBufferOffset = 16;

// Zero-filled storage for `bytes`, starting kBufferOffset past a 64-byte boundary.
std::byte* allocateBuffer(size_t bytes);
void freeBuffer(std::byte* p);

class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-filled storage for `type`.
  explicit Tensor(TensorType type);

  const TensorType& type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  int64_t numElements() const { return type_.shape.numElements(); }
  size_t bytes() const { return static_cast<size_t>(numElements()) * dtypeSize(type_.dtype); }
  bool empty() const { return storage_ == nullptr; }

  void* raw() { return storage_.get(); }
  const void* raw() const { return storage_.get(); }

  // Typed access; asserts that T matches the element size of the dtype.
  template <typename T>
  T* data() {
    PGQ_ASSERT(sizeof(T) == dtypeSize(type_.dtype), "tensor {} accessed with a {}-byte type",
               type_.toString(), sizeof(T));
    return static_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    PGQ_ASSERT(sizeof(T) == dtypeSize(type_.dtype), "tensor {} accessed with a {}-byte type",
               type_.toString(), sizeof(T));
    return static_cast<const T*>(raw());
  }

  Tensor clone() const;

 private:
  struct Free {
    void operator()(std::byte* p) const { freeBuffer(p); }
  };
  TensorType type_;
  std::unique_ptr<std::byte[], Free> storage_;
};



}  // namespace pgq
