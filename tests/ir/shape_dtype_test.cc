#include <gtest/gtest.h>

#include "ir/dtype.h"
#include "ir/shape.h"
#include "support/errors.h"

namespace pgq {
namespace {

TEST(DType, NamesRoundTrip) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kS8, DType::kU8, DType::kS32})
    EXPECT_EQ(parseDType(dtypeName(d)), d);
  EXPECT_EQ(parseDType("f64"), std::nullopt);
  EXPECT_EQ(dtypeSize(DType::kBF16), 2u);
  EXPECT_EQ(dtypeSize(DType::kS32), 4u);
  EXPECT_TRUE(isFloat(DType::kBF16));
  EXPECT_FALSE(isFloat(DType::kS8));
}

TEST(Shape, BasicsAndLimits) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numElements(), 24);
  EXPECT_EQ(s.product(1, 3), 12);
  EXPECT_EQ(s.toString(), "[2,3,4]");
  EXPECT_EQ(Shape().numElements(), 1);
  EXPECT_EQ(Shape().toString(), "[]");
  EXPECT_THROW(Shape({2, 0}), Error);
  EXPECT_THROW(Shape({-1}), Error);
  EXPECT_THROW(Shape({1, 1, 1, 1, 1, 1, 1, 1, 1}), Error);
  EXPECT_THROW(Shape({int64_t{1} << 30, int64_t{1} << 30}), Error);
  EXPECT_NO_THROW(Shape({int64_t{1} << 20, int64_t{1} << 20}));
}

}  // namespace
}  // namespace pgq
