#include "kernels/quant_format.h"

#include <gtest/gtest.h>

#include "kernels/cpu_isa.h"
#include "kernels/gemm.h"
#include "kernels/kernel_error.h"

namespace pgq::kernels {
namespace {

TEST(QuantFormat, KernelsReportABadFormatAsKernelError) {
  EXPECT_THROW(checkFormat(perChannelFormat(9)), KernelError);
  EXPECT_NO_THROW(checkFormat(perChannelFormat(8)));
}

TEST(QuantFormat, GridsAndStorage) {
  QuantFormat sym8 = perChannelFormat(8);
  EXPECT_EQ(gridOf(sym8).lo, -127);
  EXPECT_EQ(gridOf(sym8).hi, 127);
  EXPECT_EQ(storageOf(sym8, GemmSide::kLhs), StorageType::kU8);
  EXPECT_EQ(storageOf(sym8, GemmSide::kRhs), StorageType::kS8);
  EXPECT_EQ(storageOffset(sym8, GemmSide::kLhs), 128);
  EXPECT_EQ(storageOffset(perChannelFormat(7), GemmSide::kLhs), 64);
  EXPECT_EQ(storageOffset(sym8, GemmSide::kRhs), 0);
  QuantFormat asym7 = QuantFormat::parse("int7:channel:rtn:asym");
  EXPECT_EQ(gridOf(asym7).lo, 0);
  EXPECT_EQ(gridOf(asym7).hi, 127);
  EXPECT_EQ(storageOffset(asym7, GemmSide::kLhs), 0);
  EXPECT_EQ(storageOffset(asym7, GemmSide::kRhs), -64);
}

TEST(QuantFormat, ParamCounts) {
  GemmShape shape{2, 6, 5, 70, false, false};
  OperandView a = lhsView(shape);  // [2][6,70], K along the columns
  OperandView b = rhsView(shape);  // [2][70,5], K along the rows
  EXPECT_EQ(a, (OperandView{2, 6, 70, true}));
  EXPECT_EQ(b, (OperandView{2, 70, 5, false}));
  EXPECT_EQ(quantParamCount(a, perTensorFormat(8)), 1);
  EXPECT_EQ(quantParamCount(a, perChannelFormat(8)), 12);
  EXPECT_EQ(quantParamCount(b, perChannelFormat(8)), 10);
  EXPECT_EQ(blockCount(a, perBlockFormat(8, 32)), 3);  // 32 + 32 + ragged 6
  EXPECT_EQ(quantParamCount(a, perBlockFormat(8, 32)), 36);
  EXPECT_EQ(quantParamCount(b, QuantFormat::parse("int8:block64:rtn:asym")), 2 * 2 * 5 * 2);
  shape.trans_a = true;
  shape.trans_b = true;
  EXPECT_EQ(lhsView(shape), (OperandView{2, 70, 6, false}));
  EXPECT_EQ(rhsView(shape), (OperandView{2, 5, 70, true}));
  EXPECT_THROW((OperandView{1, 0, 4, true}).validate(), KernelError);
  EXPECT_THROW((GemmShape{1, 4, 4, 0}).validate(), KernelError);
  EXPECT_THROW((GemmShape{1, int64_t(1) << 40, int64_t(1) << 40, 1 << 30}).validate(), KernelError);
}

TEST(Int8Caps, ExactPairs) {
  const Int8Caps& caps = int8Caps();
  EXPECT_FALSE(caps.isa_name.empty());
  EXPECT_TRUE(caps.exact(8, 7));
  EXPECT_TRUE(caps.exact(7, 8));
  EXPECT_TRUE(caps.exact(4, 4));
  EXPECT_EQ(caps.exact(8, 8), caps.vnni);
  Int8Caps plain = int8CapsFor(false, "avx2");
  Int8Caps vnni = int8CapsFor(true, "avx512_core_vnni");
  EXPECT_FALSE(plain.exact(8, 8));
  EXPECT_TRUE(vnni.exact(8, 8));
  EXPECT_NE(plain.describe().find("no VNNI"), std::string::npos);
}

TEST(Int8Caps, ExactFormatsNarrowTheChosenSide) {
  Int8Caps plain = int8CapsFor(false, "avx2");
  Int8Caps vnni = int8CapsFor(true, "avx2_vnni");
  GemmFormats f =
      defaultGemmFormats(8, Rounding::kNearest, Rounding::kStochastic, GemmSide::kRhs, plain);
  EXPECT_EQ(f.lhs.toString(), "int8:channel:rtn");
  EXPECT_EQ(f.rhs.toString(), "int7:channel:sr");
  f = exactGemmFormats(perChannelFormat(8), perChannelFormat(8), GemmSide::kLhs, plain);
  EXPECT_EQ(f.lhs.bits, 7);
  EXPECT_EQ(f.rhs.bits, 8);
  f = exactGemmFormats(perChannelFormat(8), perChannelFormat(8), GemmSide::kLhs, vnni);
  EXPECT_EQ(f.lhs.bits, 8);
  EXPECT_EQ(f.rhs.bits, 8);
  // Already exact: unchanged.
  f = exactGemmFormats(perChannelFormat(6), perChannelFormat(8), GemmSide::kRhs, plain);
  EXPECT_EQ(f.lhs.bits, 6);
  EXPECT_EQ(f.rhs.bits, 8);
  EXPECT_NO_THROW(checkExactInt8Gemm(f.lhs, f.rhs, plain));
  EXPECT_THROW(checkExactInt8Gemm(perChannelFormat(8), perChannelFormat(8), plain), KernelError);
  EXPECT_NO_THROW(checkExactInt8Gemm(perChannelFormat(8), perChannelFormat(8), vnni));
}

}  // namespace
}  // namespace pgq::kernels
