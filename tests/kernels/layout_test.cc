#include "kernels/layout.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <tuple>
#include <vector>

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "kernels/elementwise.h"
#include "kernels/kernel_error.h"
#include "tests/kernels/f32_test_util.h"

namespace pgq::kernels {
namespace {

using testing::Guarded;
using testing::kThreadCounts;
using testing::randomVector;
using testing::ThreadCount;

// Direct definition: y[j] = x[i] where y's multi-index j_k = x's multi-index i_perm[k].
std::vector<float> transposeRef(const std::vector<float>& x, const std::vector<int64_t>& dims,
                                const std::vector<int64_t>& perm) {
  const size_t rank = dims.size();
  std::vector<int64_t> x_strides(rank, 1), y_dims(rank);
  for (size_t d = rank; d-- > 1;) x_strides[d - 1] = x_strides[d] * dims[d];
  for (size_t i = 0; i < rank; ++i) y_dims[i] = dims[static_cast<size_t>(perm[i])];
  std::vector<float> y(x.size());
  for (size_t pos = 0; pos < y.size(); ++pos) {
    int64_t rest = static_cast<int64_t>(pos), offset = 0;
    for (size_t i = rank; i-- > 0;) {
      offset += rest % y_dims[i] * x_strides[static_cast<size_t>(perm[i])];
      rest /= y_dims[i];
    }
    y[pos] = x[static_cast<size_t>(offset)];
  }
  return y;
}

void checkTranspose(const std::vector<int64_t>& dims, const std::vector<int64_t>& perm) {
  const int64_t n = std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
  const std::vector<float> x = randomVector(n, 61);
  Guarded y(n);
  transpose(x.data(), y.data(), dims, perm);
  ASSERT_EQ(y.values(), transposeRef(x, dims, perm))
      << "dims [" << fmt::format("{}", fmt::join(dims, ",")) << "] perm [" << fmt::format("{}", fmt::join(perm, ","))
      << "]";
  ASSERT_TRUE(y.guardsIntact());
}

TEST(TransposeTest, EveryPermutationOfRank3And4) {
  const std::vector<std::vector<int64_t>> shapes = {{3, 5, 7}, {1, 9, 4}, {8, 8, 8}, {2, 1, 33},
                                                    {2, 3, 5, 7}, {3, 1, 9, 2}, {4, 17, 1, 10}};
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (const auto& dims : shapes) {
      std::vector<int64_t> perm(dims.size());
      std::iota(perm.begin(), perm.end(), int64_t{0});
      do {
        checkTranspose(dims, perm);
      } while (std::next_permutation(perm.begin(), perm.end()));
    }
  }
}

TEST(TransposeTest, FastPathsOnModelShapesAndEdges) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    // [B,T,H,D] <-> [B,H,T,D] at the small model's size and with awkward sizes.
    checkTranspose({16, 128, 4, 64}, {0, 2, 1, 3});
    checkTranspose({16, 4, 128, 64}, {0, 2, 1, 3});
    checkTranspose({3, 7, 5, 3}, {0, 2, 1, 3});
    // Last two dims swapped: full 8x8 blocks, partial tiles, single rows/columns.
    checkTranspose({2, 3, 37, 41}, {0, 1, 3, 2});
    checkTranspose({64, 128, 64}, {0, 2, 1});
    checkTranspose({33, 70}, {1, 0});
    checkTranspose({256, 2048}, {1, 0});
    checkTranspose({1, 100}, {1, 0});
    checkTranspose({100, 1}, {1, 0});
    checkTranspose({5, 8, 16}, {0, 2, 1});
    // Generic path with a strided innermost run, above the parallel threshold.
    checkTranspose({40, 30, 20}, {2, 0, 1});
    checkTranspose({6, 7, 8, 9, 2}, {4, 2, 0, 3, 1});
    // Identity, rank 0 and 1, all-ones.
    checkTranspose({20000}, {0});
    checkTranspose({}, {});
    checkTranspose({1, 1, 1}, {2, 0, 1});
    checkTranspose({4, 5}, {0, 1});
  }
}

TEST(TransposeTest, EmptyTensorsWriteNothing) {
  float y = 7.0f;
  const std::vector<int64_t> dims = {3, 0, 4};
  const std::vector<int64_t> perm = {2, 1, 0};
  transpose(nullptr, &y, dims, perm);
  EXPECT_EQ(y, 7.0f);
}

TEST(TransposeTest, BadPermutationsThrow) {
  float v = 0.0f;
  const std::vector<int64_t> dims = {2, 3};
  EXPECT_THROW(transpose(&v, &v, dims, std::vector<int64_t>{0}), KernelError);
  EXPECT_THROW(transpose(&v, &v, dims, std::vector<int64_t>{0, 0}), KernelError);
  EXPECT_THROW(transpose(&v, &v, dims, std::vector<int64_t>{0, 2}), KernelError);
  EXPECT_THROW(transpose(&v, &v, dims, std::vector<int64_t>{-1, 0}), KernelError);
  EXPECT_THROW(transpose(&v, &v, std::vector<int64_t>{2, -3}, std::vector<int64_t>{1, 0}), KernelError);
}

TEST(GatherTest, CopiesIndexedRows) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (auto [n_idx, rows, cols] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {5, 3, 7}, {2048, 256, 256},
                                     {100, 1000, 9}, {0, 4, 4}}) {
      const std::vector<float> table = randomVector(rows * cols, 62);
      std::vector<int32_t> idx(static_cast<size_t>(n_idx));
      for (int64_t i = 0; i < n_idx; ++i) idx[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 3) % rows);
      Guarded y(n_idx * cols);
      gather(table.data(), idx.data(), y.data(), n_idx, rows, cols);
      for (int64_t i = 0; i < n_idx; ++i)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(y[i * cols + c], table[static_cast<size_t>(idx[static_cast<size_t>(i)] * cols + c)]);
      EXPECT_TRUE(y.guardsIntact());
    }
  }
}

TEST(GatherTest, OutOfRangeIndexThrowsAndWritesNothing) {
  const std::vector<float> table = randomVector(4 * 3, 63);
  for (int32_t bad : {-1, 4, 1 << 30}) {
    const std::vector<int32_t> idx = {0, 1, bad};
    Guarded y(3 * 3, 9.0f);
    EXPECT_THROW(gather(table.data(), idx.data(), y.data(), 3, 4, 3), KernelError) << bad;
    for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(y[i], 9.0f);
    std::vector<float> grad(4 * 3);
    EXPECT_THROW(scatterAdd(table.data(), idx.data(), grad.data(), 3, 4, 3), KernelError) << bad;
  }
}

// f32 sums in index order: the kernel must match this bit for bit (it promises that
// order for any thread count).
std::vector<float> scatterAddRef(const std::vector<float>& dy, const std::vector<int32_t>& idx, int64_t rows,
                                 int64_t cols) {
  std::vector<float> g(static_cast<size_t>(rows * cols), 0.0f);
  for (size_t i = 0; i < idx.size(); ++i)
    for (int64_t c = 0; c < cols; ++c)
      g[static_cast<size_t>(idx[i] * cols + c)] += dy[i * static_cast<size_t>(cols) + static_cast<size_t>(c)];
  return g;
}

TEST(ScatterAddTest, MatchesIndexOrderSumsExactly) {
  // Wide tables (columns split among threads), narrow ones (table rows split), tails.
  const std::tuple<int64_t, int64_t, int64_t> shapes[] = {{1, 1, 1},     {7, 3, 5},     {2048, 256, 256},
                                                          {5000, 300, 3}, {3000, 8, 17}, {4096, 50, 40},
                                                          {0, 6, 6}};
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (auto [n_idx, rows, cols] : shapes) {
      const std::vector<float> dy = randomVector(n_idx * cols, 64);
      std::vector<int32_t> idx(static_cast<size_t>(n_idx));
      // Repeated indices, and some table rows never hit (they must come out 0).
      for (int64_t i = 0; i < n_idx; ++i)
        idx[static_cast<size_t>(i)] = static_cast<int32_t>((i * i + 5 * i) % std::max<int64_t>(1, rows - 1));
      Guarded g(rows * cols, 123.0f);  // stale contents must be overwritten
      scatterAdd(dy.data(), idx.data(), g.data(), n_idx, rows, cols);
      EXPECT_TRUE(testing::bitwiseEqual(g.values(), scatterAddRef(dy, idx, rows, cols)))
          << n_idx << "," << rows << "," << cols << " threads " << threads;
      EXPECT_TRUE(g.guardsIntact());
    }
  }
}

// addScatter is scatterAdd into a table and then the elementwise add, bit for bit: rows
// hit once, several times and never, a's -0 (which the add of a table's 0 makes +0) and
// NaN, at 1 and 2 threads; and it refuses an index as scatterAdd does.
TEST(AddScatterTest, IsScatterAddThenAddBitForBit) {
  const std::tuple<int64_t, int64_t, int64_t> shapes[] = {{1, 1, 1}, {7, 3, 5}, {256, 5000, 96}, {300, 40, 17}, {0, 6, 6}};
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (auto [n_idx, rows, cols] : shapes) {
      const std::vector<float> dy = randomVector(n_idx * cols, 64);
      std::vector<float> a = randomVector(rows * cols, 65);
      if (a.size() > 3) {
        a[0] = -0.0f;
        a[a.size() - 1] = -0.0f;
        a[a.size() / 2] = std::numeric_limits<float>::quiet_NaN();
      }
      std::vector<int32_t> idx(static_cast<size_t>(n_idx));
      for (int64_t i = 0; i < n_idx; ++i)
        idx[static_cast<size_t>(i)] = static_cast<int32_t>((i * i + 5 * i) % std::max<int64_t>(1, rows - 1));
      std::vector<float> table(a.size()), expected(a.size()), y(a.size(), 123.0f);
      scatterAdd(dy.data(), idx.data(), table.data(), n_idx, rows, cols);
      binary(BinaryOp::kAdd, a.data(), Bcast::kFull, table.data(), Bcast::kFull, expected.data(), 1, rows * cols);
      addScatter(a.data(), dy.data(), idx.data(), y.data(), n_idx, rows, cols);
      EXPECT_TRUE(testing::bitwiseEqual(y, expected)) << n_idx << "," << rows << "," << cols << " threads " << threads;
      // In place (y == a): the touched rows as above; an untouched row keeps a's bits,
      // its -0 included (a + 0 would be +0).
      std::vector<bool> touched(static_cast<size_t>(rows), false);
      for (int32_t r : idx) touched[static_cast<size_t>(r)] = true;
      std::vector<float> in_place = a, expected_in_place = expected;
      for (int64_t r = 0; r < rows; ++r)
        if (!touched[static_cast<size_t>(r)])
          std::copy_n(a.begin() + r * cols, cols, expected_in_place.begin() + r * cols);
      addScatter(in_place.data(), dy.data(), idx.data(), in_place.data(), n_idx, rows, cols);
      EXPECT_TRUE(testing::bitwiseEqual(in_place, expected_in_place))
          << "in place " << n_idx << "," << rows << "," << cols << " threads " << threads;
    }
  }
  std::vector<float> a(12), dy(6), y(12);
  const std::vector<int32_t> bad = {0, 4};
  EXPECT_THROW(addScatter(a.data(), dy.data(), bad.data(), y.data(), 2, 4, 3), KernelError);
}

// The position of every element of a box of extents `box` in a tensor of dims `dims`
// where the box starts at `start`, in the box's row-major order.
std::vector<size_t> boxOffsets(const std::vector<int64_t>& dims, const std::vector<int64_t>& start,
                               const std::vector<int64_t>& box) {
  const int64_t n = std::accumulate(box.begin(), box.end(), int64_t{1}, std::multiplies<>());
  std::vector<size_t> offsets;
  for (int64_t pos = 0; pos < n; ++pos) {
    int64_t rest = pos, offset = 0, stride = 1;
    for (size_t d = box.size(); d-- > 0;) {
      offset += (start[d] + rest % box[d]) * stride;
      rest /= box[d];
      stride *= dims[d];
    }
    offsets.push_back(static_cast<size_t>(offset));
  }
  return offsets;
}

struct BoxCase {
  std::vector<int64_t> dims, start, box;
};

// Inner boxes, boxes whole along trailing dims (one long run), whole tensors, rank 0 and
// 1, and one above the parallel threshold.
const std::vector<BoxCase> kBoxCases = {
    {{5, 7, 9}, {1, 2, 3}, {3, 4, 5}},
    {{5, 7, 9}, {2, 0, 0}, {2, 7, 9}},
    {{5, 7, 9}, {0, 3, 0}, {5, 2, 9}},
    {{5, 7, 9}, {0, 0, 0}, {5, 7, 9}},
    {{5, 7, 9}, {4, 6, 8}, {1, 1, 1}},
    {{}, {}, {}},
    {{37}, {5}, {29}},
    {{2, 3, 4, 5}, {1, 0, 1, 0}, {1, 3, 2, 5}},
    {{64, 300, 3}, {3, 17, 0}, {60, 250, 3}},
};

TEST(SliceTest, CopiesTheBox) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (const BoxCase& c : kBoxCases) {
      const int64_t n = std::accumulate(c.dims.begin(), c.dims.end(), int64_t{1}, std::multiplies<>());
      const std::vector<float> x = randomVector(n, 71);
      const std::vector<size_t> offsets = boxOffsets(c.dims, c.start, c.box);
      Guarded y(static_cast<int64_t>(offsets.size()));
      slice(x.data(), y.data(), c.dims, c.start, c.box);
      std::vector<float> want;
      for (size_t o : offsets) want.push_back(x[o]);
      ASSERT_EQ(y.values(), want) << "dims [" << fmt::format("{}", fmt::join(c.dims, ",")) << "]";
      ASSERT_TRUE(y.guardsIntact());
    }
  }
}

TEST(PadTest, ZerosAroundTheOperand) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (const BoxCase& c : kBoxCases) {
      // The box case read backwards: x has the box's dims and lands at `start` of dims.
      std::vector<int64_t> high;
      for (size_t d = 0; d < c.dims.size(); ++d) high.push_back(c.dims[d] - c.start[d] - c.box[d]);
      const int64_t nx = std::accumulate(c.box.begin(), c.box.end(), int64_t{1}, std::multiplies<>());
      const int64_t ny = std::accumulate(c.dims.begin(), c.dims.end(), int64_t{1}, std::multiplies<>());
      const std::vector<float> x = randomVector(nx, 72);
      Guarded y(ny, 9.0f);  // pad must overwrite every element
      pad(x.data(), y.data(), c.box, c.start, high);
      std::vector<float> want(static_cast<size_t>(ny), 0.0f);
      const std::vector<size_t> offsets = boxOffsets(c.dims, c.start, c.box);
      for (size_t i = 0; i < offsets.size(); ++i) want[offsets[i]] = x[i];
      ASSERT_EQ(y.values(), want) << "dims [" << fmt::format("{}", fmt::join(c.dims, ",")) << "]";
      ASSERT_TRUE(y.guardsIntact());
    }
  }
}

TEST(ConcatTest, JoinsRowByRow) {
  for (int threads : kThreadCounts) {
    ThreadCount tc(threads);
    for (auto [outer, a_inner, b_inner] : {std::tuple<int64_t, int64_t, int64_t>{1, 5, 3}, {7, 1, 9},
                                          {13, 17, 0}, {0, 4, 4}, {300, 33, 70}, {3, 8, 8}}) {
      const std::vector<float> a = randomVector(outer * a_inner, 73), b = randomVector(outer * b_inner, 74);
      Guarded y(outer * (a_inner + b_inner));
      concat(a.data(), b.data(), y.data(), outer, a_inner, b_inner);
      std::vector<float> want;
      for (int64_t o = 0; o < outer; ++o) {
        want.insert(want.end(), a.begin() + o * a_inner, a.begin() + (o + 1) * a_inner);
        want.insert(want.end(), b.begin() + o * b_inner, b.begin() + (o + 1) * b_inner);
      }
      ASSERT_EQ(y.values(), want) << outer << " x (" << a_inner << " + " << b_inner << ")";
      ASSERT_TRUE(y.guardsIntact());
    }
  }
}

TEST(SlicePadConcatTest, BadArgumentsThrow) {
  float v = 0.0f;
  const std::vector<int64_t> dims = {2, 3};
  using V = std::vector<int64_t>;
  EXPECT_THROW(slice(&v, &v, dims, V{0}, V{2, 3}), KernelError);
  EXPECT_THROW(slice(&v, &v, dims, V{0, 1}, V{2, 3}), KernelError);  // past the end
  EXPECT_THROW(slice(&v, &v, dims, V{-1, 0}, V{1, 3}), KernelError);
  EXPECT_THROW(pad(&v, &v, dims, V{0, -1}, V{0, 0}), KernelError);
  EXPECT_THROW(pad(&v, &v, dims, V{0}, V{0, 0}), KernelError);
  EXPECT_THROW(concat(&v, &v, &v, 2, -1, 3), KernelError);
}

}  // namespace
}  // namespace pgq::kernels
