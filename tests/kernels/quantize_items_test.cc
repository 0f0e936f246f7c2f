#include "kernels/quantize_items.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/kernel_error.h"
#include "kernels/softmax.h"
#include "quant_test_util.h"

namespace pgq::kernels {
namespace {

using qtest::normalData;
using qtest::ThreadCount;

// An entry; `out` null for scales alone.
ItemQuantization entry(const float* x, const OperandView& item, const QuantFormat& format, float* params,
                       void* out = nullptr, bool u8 = false, int scales_of = -1, bool dynamic = false) {
  ItemQuantization e;
  e.x = x;
  e.item = item;
  e.format = format;
  e.params = params;
  e.out = out;
  e.u8 = u8;
  e.scales_of = scales_of;
  e.dynamic = dynamic;
  e.sr = {9, 2};
  return e;
}

// An attention's scores' gradient made item by item (softmaxGrad with a causal prologue),
// then quantized along its rows and along its columns, and the probabilities it read
// along their columns, in several formats: every scale, zero point and stored byte equals
// the whole value's kernels' (computeQuantParams, quantize, quantizeDynamic), at 1 and 2
// threads. Items hold NaN, Inf and an all-zero row.
TEST(QuantizeItems, GiveTheWholeValuesKernelsResultsBitForBit) {
  const int64_t items = 5, rows = 12, cols = 40, n = items * rows * cols;
  std::vector<float> p = normalData(n, 3), dp = normalData(n, 4);
  for (float& v : p) v = std::abs(v) * 0.1f;
  dp[7] = std::numeric_limits<float>::quiet_NaN();
  dp[rows * cols + 3] = std::numeric_limits<float>::infinity();
  p[2 * rows * cols + 5] = -std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < cols; ++c) dp[3 * rows * cols + 4 * cols + c] = 0.0f;
  SoftmaxPrologue prologue;
  prologue.scale = 0.125f;
  prologue.causal = true;
  prologue.fill = -std::numeric_limits<float>::max();
  prologue.tq = rows;
  std::vector<float> ds(n);
  softmaxGrad(p.data(), dp.data(), ds.data(), items * rows, cols, prologue);

  for (const char* text : {"int8:channel:rtn", "int8:channel:rtn:asym", "int7:block8:rtn", "int4:channel:rtn"}) {
    const QuantFormat format = QuantFormat::parse(text);
    SCOPED_TRACE(text);
    const OperandView by_row{items, rows, cols, true}, by_col{items, rows, cols, false};
    // The whole value's kernels.
    std::vector<float> ds_row(quantParamCount(by_row, format)), ds_col(quantParamCount(by_col, format)),
        p_col(quantParamCount(by_col, format));
    std::vector<uint8_t> ds_row_q(n);
    std::vector<int8_t> ds_col_q(n), p_col_q(n);
    computeQuantParams(ds, by_row, format, ds_row);
    quantize(ds, by_row, format, ds_row, std::span<uint8_t>(ds_row_q), {9, 2});
    quantizeDynamic(ds, by_col, format, ds_col, std::span<int8_t>(ds_col_q), {9, 2});
    computeQuantParams(p, by_col, format, p_col);
    quantize(p, by_col, format, p_col, std::span<int8_t>(p_col_q), {9, 2});

    for (int threads : testing::kThreadCounts) {
      SCOPED_TRACE(threads);
      ThreadCount guard(threads);
      std::vector<float> got_ds(n, -1.0f), got_row(ds_row.size(), -1.0f), got_col(ds_col.size(), -1.0f),
          got_p_col(p_col.size(), -1.0f);
      std::vector<uint8_t> got_row_q(n, 1);
      std::vector<int8_t> got_col_q(n, 1), got_p_col_q(n, 1);
      const OperandView item_row{1, rows, cols, true}, item_col{1, rows, cols, false};
      const std::vector<ItemQuantization> entries = {
          entry(got_ds.data(), item_row, format, got_row.data()),
          entry(got_ds.data(), item_row, format, got_row.data(), got_row_q.data(), true, 0),
          entry(got_ds.data(), item_col, format, got_col.data()),
          entry(got_ds.data(), item_col, format, got_col.data(), got_col_q.data(), false, 2, true),
          entry(p.data(), item_col, format, got_p_col.data()),
          entry(p.data(), item_col, format, got_p_col.data(), got_p_col_q.data(), false, 4)};
      quantizeItems(
          items,
          [&](int64_t b) {
            const int64_t o = b * rows * cols;
            softmaxGrad(p.data() + o, dp.data() + o, got_ds.data() + o, rows, cols, prologue);
          },
          entries);
      EXPECT_EQ(std::memcmp(got_ds.data(), ds.data(), n * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(got_row.data(), ds_row.data(), ds_row.size() * sizeof(float)), 0);
      EXPECT_EQ(got_row_q, ds_row_q);
      EXPECT_EQ(std::memcmp(got_col.data(), ds_col.data(), ds_col.size() * sizeof(float)), 0);
      EXPECT_EQ(got_col_q, ds_col_q);
      EXPECT_EQ(std::memcmp(got_p_col.data(), p_col.data(), p_col.size() * sizeof(float)), 0);
      EXPECT_EQ(got_p_col_q, p_col_q);
    }
  }
}

// Formats whose results depend on more than one item, or entries that read scales no
// earlier entry makes, are refused before anything runs.
TEST(QuantizeItems, RefusesWhatItCannotQuantizeItemByItem) {
  EXPECT_TRUE(quantizesItemsAlone(QuantFormat::parse("int8:block32:rtn")));
  for (const char* text : {"int8:channel:sr", "int8:tensor:rtn", "int8:channel:rtn:clip=mse", "e4m3:channel:rtn"})
    EXPECT_FALSE(quantizesItemsAlone(QuantFormat::parse(text))) << text;
  std::vector<float> x(2 * 4 * 8, 1.0f), params(8);
  std::vector<int8_t> q(x.size());
  const OperandView item{1, 4, 8, true};
  int made = 0;
  auto make = [&](int64_t) { ++made; };
  const QuantFormat sr = QuantFormat::parse("int8:channel:sr");
  std::vector<ItemQuantization> stochastic = {entry(x.data(), item, sr, params.data())};
  EXPECT_THROW(quantizeItems(2, make, stochastic), KernelError);
  const QuantFormat rtn = QuantFormat::parse("int8:channel:rtn");
  std::vector<ItemQuantization> orphan = {entry(x.data(), item, rtn, params.data(), q.data(), false, 0)};
  EXPECT_THROW(quantizeItems(2, make, orphan), KernelError);
  std::vector<ItemQuantization> batched = {entry(x.data(), {2, 4, 8, true}, rtn, params.data())};
  EXPECT_THROW(quantizeItems(2, make, batched), KernelError);
  EXPECT_EQ(made, 0);
}

}  // namespace
}  // namespace pgq::kernels
