#include "ir/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/errors.h"

namespace pgq {

Shape::Shape(std::initializer_list<int64_t> dims) : dims_(dims) { validate(); }

Shape::Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) { validate(); }

void Shape::validate() const {
  if (rank() > kMaxRank)
    throw Error(fmt::format("shape {} has rank {}, at most {} is supported", toString(), rank(),
                            kMaxRank));
  int64_t count = 1;
  for (int64_t d : dims_) {
    if (d < 1) throw Error(fmt::format("shape {} has a dimension {} < 1", toString(), d));
    if (d > kMaxElements || count > kMaxElements / d)
      throw Error(fmt::format("shape {} has more than 2^40 elements", toString()));
    count *= d;
  }
}

int64_t Shape::numElements() const { return product(0, rank()); }

int64_t Shape::product(int from, int to) const {
  int64_t p = 1;
  for (int i = from; i < to; ++i) p *= dims_[static_cast<size_t>(i)];
  return p;
}

std::string Shape::toString() const { return fmt::format("[{}]", fmt::join(dims_, ",")); }

}  // namespace pgq
