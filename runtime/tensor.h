#pragma once
// A dense, row-major, 64-byte-aligned tensor owned by the runtime (parameters,
// optimizer state, batches, graph outputs). Its type is the IR's TensorType.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "ir/errors.h"
#include "ir/node.h"

namespace pgq {

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
    void operator()(std::byte* p) const;
  };
  TensorType type_;
  std::unique_ptr<std::byte[], Free> storage_;
};

// 64-byte-aligned, zero-filled allocation of `bytes` (at least one cache line).
std::byte* allocateAligned(size_t bytes);
void freeAligned(std::byte* p);

}  // namespace pgq
