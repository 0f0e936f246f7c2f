#pragma once
// Static tensor shapes: row-major, every dimension at least 1, rank at most kMaxRank.
// A rank-0 shape is a scalar. Limits keep element counts far from int64 overflow, so
// a shape read from a file can never make later arithmetic undefined.
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace pgq {

class Shape {
 public:
  static constexpr int kMaxRank = 8;
  static constexpr int64_t kMaxElements = int64_t{1} << 40;

  Shape() = default;
  // Throws pgq::Error when a dim is < 1, the rank is too high or the count too large.
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::vector<int64_t> dims);

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[static_cast<size_t>(i)]; }
  std::span<const int64_t> dims() const { return dims_; }
  int64_t numElements() const;

  // Product of dims [from, to).
  int64_t product(int from, int to) const;

  std::string toString() const;  // "[2,3]", "[]" for a scalar
  bool operator==(const Shape& other) const = default;

 private:
  void validate() const;
  std::vector<int64_t> dims_;
};

}  // namespace pgq
