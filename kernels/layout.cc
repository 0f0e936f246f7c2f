#include "kernels/layout.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include <fmt/ranges.h>

#include "kernels/kernel_error.h"
#include "kernels/vec_math.h"

namespace pgq::kernels {
namespace {

// A permutation after dropping size-1 dims and merging dims that stay adjacent and in
// order: `dims` are x's dims, output dim i is x dim perm[i].
struct Permutation {
  std::vector<int64_t> dims;
  std::vector<int64_t> perm;
};

void checkPermutation(std::span<const int64_t> dims, std::span<const int64_t> perm) {
  if (dims.size() != perm.size())
    throw KernelError::format("transpose: perm has {} entries for a rank-{} tensor", perm.size(),
                              dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(dims.size()) || seen[static_cast<size_t>(p)])
      throw KernelError::format("transpose: perm [{}] is not a permutation of 0..{}",
                                fmt::join(perm, ","), static_cast<int64_t>(dims.size()) - 1);
    seen[static_cast<size_t>(p)] = true;
  }
  for (int64_t d : dims)
    if (d < 0) throw KernelError::format("transpose: dims must be >= 0, got [{}]", fmt::join(dims, ","));
}

Permutation simplify(std::span<const int64_t> dims, std::span<const int64_t> perm) {
  // Drop size-1 dims, renumbering the rest.
  std::vector<int64_t> renumbered(dims.size(), -1);
  std::vector<int64_t> kept_dims;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    renumbered[d] = static_cast<int64_t>(kept_dims.size());
    kept_dims.push_back(dims[d]);
  }
  std::vector<int64_t> kept_perm;
  for (int64_t p : perm)
    if (dims[static_cast<size_t>(p)] != 1) kept_perm.push_back(renumbered[static_cast<size_t>(p)]);
  // Consecutive output dims that read consecutive x dims form one group.
  struct Group {
    int64_t first, last;
  };
  std::vector<Group> groups;
  for (int64_t p : kept_perm) {
    if (!groups.empty() && p == groups.back().last + 1)
      groups.back().last = p;
    else
      groups.push_back({p, p});
  }
  std::vector<size_t> by_x(groups.size());
  std::iota(by_x.begin(), by_x.end(), size_t{0});
  std::sort(by_x.begin(), by_x.end(), [&](size_t a, size_t b) { return groups[a].first < groups[b].first; });
  Permutation out;
  out.dims.resize(groups.size());
  out.perm.resize(groups.size());
  for (size_t pos = 0; pos < by_x.size(); ++pos) {
    const Group& g = groups[by_x[pos]];
    out.dims[pos] = 1;
    for (int64_t d = g.first; d <= g.last; ++d) out.dims[pos] *= kept_dims[static_cast<size_t>(d)];
    out.perm[by_x[pos]] = static_cast<int64_t>(pos);
  }
  return out;
}

// Transposes the 8x8 block at x (row stride ldx) into y (row stride ldy).
inline void transpose8x8(const float* x, int64_t ldx, float* y, int64_t ldy) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(x + i * ldx);
  __m256 t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m256 u[8];
  for (int h = 0; h < 2; ++h) {
    const int b = 4 * h;
    u[b + 0] = _mm256_shuffle_ps(t[b + 0], t[b + 2], 0x44);
    u[b + 1] = _mm256_shuffle_ps(t[b + 0], t[b + 2], 0xEE);
    u[b + 2] = _mm256_shuffle_ps(t[b + 1], t[b + 3], 0x44);
    u[b + 3] = _mm256_shuffle_ps(t[b + 1], t[b + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(y + i * ldy, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(y + (i + 4) * ldy, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

// [batch, rows, cols] -> [batch, cols, rows], in 32x32 tiles so that both the rows read
// and the rows written stay in L1 while a tile is done.
void transposeBatched(const float* x, float* y, int64_t batch, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t col_tiles = (cols + kTile - 1) / kTile;
  vec::parallelRanges(batch * col_tiles * row_tiles, kTile * kTile, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / (col_tiles * row_tiles);
      const int64_t c0 = task / row_tiles % col_tiles * kTile;
      const int64_t r0 = task % row_tiles * kTile;
      const int64_t c1 = std::min(cols, c0 + kTile);
      const int64_t r1 = std::min(rows, r0 + kTile);
      const float* xb = x + b * rows * cols;
      float* yb = y + b * rows * cols;
      const int64_t r8 = r0 + (r1 - r0) / 8 * 8;
      const int64_t c8 = c0 + (c1 - c0) / 8 * 8;
      for (int64_t c = c0; c < c8; c += 8)
        for (int64_t r = r0; r < r8; r += 8) transpose8x8(xb + r * cols + c, cols, yb + c * rows + r, rows);
      // Edges that do not fill an 8x8 block.
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = (c < c8 ? r8 : r0); r < r1; ++r) yb[c * rows + r] = xb[r * cols + c];
    }
  });
}

std::vector<int64_t> stridesOf(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) strides[d - 1] = strides[d] * dims[d];
  return strides;
}

// Walks positions of a multi-index over `dims` in row-major order, keeping the
// offset into another buffer whose stride for each of those dims is `strides`.
struct Odometer {
  std::vector<int64_t> index;
  int64_t offset = 0;
  Odometer(int64_t pos, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides)
      : index(dims.size()) {
    for (size_t d = dims.size(); d-- > 0;) {
      index[d] = pos % dims[d];
      pos /= dims[d];
      offset += index[d] * strides[d];
    }
  }
  // Moves to the next position, the last dim fastest.
  void advance(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
    for (size_t d = dims.size(); d-- > 0;) {
      offset += strides[d];
      if (++index[d] < dims[d]) return;
      offset -= index[d] * strides[d];
      index[d] = 0;
    }
  }
};

// Inline rather than memcpy: the runs here are short (a head of 64 floats), where
// the call and memcpy's size dispatch cost as much as the copy.
void copyRun(const float* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) vec::storePart(dst + i, n - i, vec::loadPart(src + i, n - i));
}

// Any permutation, as runs along one contiguous dim. When the last dim stays last
// (e.g. [B,T,H,D] -> [B,H,T,D]) every run is a contiguous copy, and the runs are
// walked in x's order: x then streams sequentially and y is written as a few
// sequential streams (one per H), as fast as a memcpy; walking in y's order would
// read x with a large stride. Otherwise the output is walked in order, each run
// gathering x with the stride of y's last dim.
void transposeGeneric(const float* x, float* y, const Permutation& p) {
  const size_t rank = p.dims.size();
  const std::vector<int64_t> x_strides = stridesOf(p.dims);
  std::vector<int64_t> out_dims(rank);
  for (size_t i = 0; i < rank; ++i) out_dims[i] = p.dims[static_cast<size_t>(p.perm[i])];
  const std::vector<int64_t> y_strides = stridesOf(out_dims);
  const bool contiguous_runs = p.perm[rank - 1] == static_cast<int64_t>(rank) - 1;
  // The walked side's leading dims, and the other side's stride for each of them.
  std::vector<int64_t> lead(rank - 1), other_strides(rank - 1);
  for (size_t i = 0; i + 1 < rank; ++i) {
    const size_t from_x = static_cast<size_t>(p.perm[i]);
    if (contiguous_runs) {
      lead[from_x] = p.dims[from_x];
      other_strides[from_x] = y_strides[i];
    } else {
      lead[i] = out_dims[i];
      other_strides[i] = x_strides[from_x];
    }
  }
  const int64_t run = out_dims[rank - 1];
  const int64_t step = x_strides[static_cast<size_t>(p.perm[rank - 1])];
  const int64_t runs = std::accumulate(lead.begin(), lead.end(), int64_t{1}, std::multiplies<>());
  vec::parallelRanges(runs, run, 1, [&](int64_t begin, int64_t end) {
    Odometer odo(begin, lead, other_strides);
    for (int64_t r = begin; r < end; ++r, odo.advance(lead, other_strides)) {
      if (contiguous_runs) {
        copyRun(x + r * run, y + odo.offset, run);
      } else {
        const float* src = x + odo.offset;
        float* dst = y + r * run;
        for (int64_t j = 0; j < run; ++j) dst[j] = src[j * step];
      }
    }
  });
}

// Copies a box of extents `box` from src (dims src_dims, box at src_start) to dst (dims
// dst_dims, box at dst_start), one contiguous run per index of the leading dims.
void copyBox(const float* src, std::span<const int64_t> src_dims, std::span<const int64_t> src_start,
             float* dst, std::span<const int64_t> dst_dims, std::span<const int64_t> dst_start,
             std::span<const int64_t> box) {
  const int64_t total = std::accumulate(box.begin(), box.end(), int64_t{1}, std::multiplies<>());
  if (total == 0) return;
  const std::vector<int64_t> src_strides = stridesOf({src_dims.begin(), src_dims.end()});
  const std::vector<int64_t> dst_strides = stridesOf({dst_dims.begin(), dst_dims.end()});
  // Dims [full, rank) are covered entirely on both sides: with dim full - 1 they form
  // one contiguous run.
  size_t full = box.size();
  while (full > 0 && box[full - 1] == src_dims[full - 1] && box[full - 1] == dst_dims[full - 1]) --full;
  int64_t src_base = 0, dst_base = 0;
  for (size_t d = 0; d < box.size(); ++d) {
    src_base += src_start[d] * src_strides[d];
    dst_base += dst_start[d] * dst_strides[d];
  }
  if (full == 0) {  // the same shape on both sides: one run
    vec::parallelRanges(total, 1, 16, [&](int64_t begin, int64_t end) {
      std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin) * sizeof(float));
    });
    return;
  }
  const std::vector<int64_t> lead(box.begin(), box.begin() + static_cast<std::ptrdiff_t>(full - 1));
  const std::vector<int64_t> lead_src(src_strides.begin(), src_strides.begin() + static_cast<std::ptrdiff_t>(full - 1));
  const std::vector<int64_t> lead_dst(dst_strides.begin(), dst_strides.begin() + static_cast<std::ptrdiff_t>(full - 1));
  const int64_t run = box[full - 1] * src_strides[full - 1];
  vec::parallelRanges(total / run, run, 1, [&](int64_t begin, int64_t end) {
    Odometer in(begin, lead, lead_src), out(begin, lead, lead_dst);
    for (int64_t r = begin; r < end; ++r, in.advance(lead, lead_src), out.advance(lead, lead_dst))
      copyRun(src + src_base + in.offset, dst + dst_base + out.offset, run);
  });
}

void checkRank(const char* kernel, std::span<const int64_t> dims, std::span<const int64_t> other,
               const char* what) {
  if (dims.size() != other.size())
    throw KernelError::format("{}: {} has {} entries for a rank-{} tensor", kernel, what, other.size(),
                              dims.size());
  for (int64_t d : dims)
    if (d < 0) throw KernelError::format("{}: dims must be >= 0, got [{}]", kernel, fmt::join(dims, ","));
}

void checkIndices(const char* kernel, const int32_t* idx, int64_t n_idx, int64_t rows) {
  for (int64_t i = 0; i < n_idx; ++i)
    if (idx[i] < 0 || idx[i] >= rows)
      throw KernelError::format("{}: index {} at position {} is outside [0, {})", kernel, idx[i], i, rows);
}

void addRow(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t k = n - i;
    vec::storePart(dst + i, k, _mm256_add_ps(vec::loadPart(dst + i, k), vec::loadPart(src + i, k)));
  }
}

}  // namespace

void transpose(const float* x, float* y, std::span<const int64_t> dims, std::span<const int64_t> perm) {
  checkPermutation(dims, perm);
  const int64_t total = std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
  if (total == 0) return;
  const Permutation p = simplify(dims, perm);
  const size_t rank = p.dims.size();
  if (rank <= 1) {  // identity after simplification
    vec::parallelRanges(total, 1, 16, [&](int64_t begin, int64_t end) {
      std::memcpy(y + begin, x + begin, static_cast<size_t>(end - begin) * sizeof(float));
    });
  } else if (rank == 2) {  // merging leaves (1, 0)
    transposeBatched(x, y, 1, p.dims[0], p.dims[1]);
  } else if (rank == 3 && p.perm[0] == 0 && p.perm[1] == 2 && p.perm[2] == 1) {
    transposeBatched(x, y, p.dims[0], p.dims[1], p.dims[2]);
  } else {
    transposeGeneric(x, y, p);
  }
}

void slice(const float* x, float* y, std::span<const int64_t> x_dims, std::span<const int64_t> starts,
           std::span<const int64_t> y_dims) {
  checkRank("slice", x_dims, starts, "starts");
  checkRank("slice", x_dims, y_dims, "the result shape");
  for (size_t d = 0; d < x_dims.size(); ++d)
    if (starts[d] < 0 || y_dims[d] < 0 || starts[d] + y_dims[d] > x_dims[d])
      throw KernelError::format("slice: a box of [{}] at [{}] does not fit in [{}]", fmt::join(y_dims, ","),
                                fmt::join(starts, ","), fmt::join(x_dims, ","));
  const std::vector<int64_t> origin(x_dims.size(), 0);
  copyBox(x, x_dims, starts, y, y_dims, origin, y_dims);
}

void pad(const float* x, float* y, std::span<const int64_t> x_dims, std::span<const int64_t> low,
         std::span<const int64_t> high) {
  checkRank("pad", x_dims, low, "low");
  checkRank("pad", x_dims, high, "high");
  std::vector<int64_t> y_dims;
  for (size_t d = 0; d < x_dims.size(); ++d) {
    if (low[d] < 0 || high[d] < 0)
      throw KernelError::format("pad: low [{}] and high [{}] must be >= 0", fmt::join(low, ","),
                                fmt::join(high, ","));
    y_dims.push_back(low[d] + x_dims[d] + high[d]);
  }
  const int64_t n = std::accumulate(y_dims.begin(), y_dims.end(), int64_t{1}, std::multiplies<>());
  // Zeros everywhere first: simpler than filling the frame, and pad sits on no hot path.
  vec::parallelRanges(n, 1, 16, [&](int64_t begin, int64_t end) {
    std::memset(y + begin, 0, static_cast<size_t>(end - begin) * sizeof(float));
  });
  const std::vector<int64_t> origin(x_dims.size(), 0);
  copyBox(x, x_dims, origin, y, y_dims, low, x_dims);
}

void concat(const float* a, const float* b, float* y, int64_t outer, int64_t a_inner, int64_t b_inner) {
  vec::checkSizes("concat", {outer, a_inner, b_inner});
  const int64_t width = a_inner + b_inner;
  if (width == 0) return;
  vec::parallelRanges(outer, width, 1, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      copyRun(a + o * a_inner, y + o * width, a_inner);
      copyRun(b + o * b_inner, y + o * width + a_inner, b_inner);
    }
  });
}

void gather(const float* table, const int32_t* idx, float* y, int64_t n_idx, int64_t rows, int64_t cols) {
  vec::checkSizes("gather", {n_idx, rows, cols});
  checkIndices("gather", idx, n_idx, rows);
  if (cols == 0) return;
  vec::parallelRanges(n_idx, cols, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      std::memcpy(y + i * cols, table + idx[i] * cols, static_cast<size_t>(cols) * sizeof(float));
  });
}

void scatterAdd(const float* dy, const int32_t* idx, float* table_grad, int64_t n_idx, int64_t rows,
                int64_t cols) {
  vec::checkSizes("scatterAdd", {n_idx, rows, cols});
  checkIndices("scatterAdd", idx, n_idx, rows);
  if (rows * cols == 0) return;
  const int threads = vec::availableThreads();
  // Accumulates dy rows into columns [c0, c1) of the table rows [r0, r1).
  auto accumulate = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    for (int64_t r = r0; r < r1; ++r)
      std::memset(table_grad + r * cols + c0, 0, static_cast<size_t>(c1 - c0) * sizeof(float));
    for (int64_t i = 0; i < n_idx; ++i)
      if (idx[i] >= r0 && idx[i] < r1) addRow(table_grad + idx[i] * cols + c0, dy + i * cols + c0, c1 - c0);
  };
  if (threads <= 1 || (n_idx + rows) * cols < vec::kMinParallelWork) {
    accumulate(0, rows, 0, cols);
    return;
  }
  // Columns split in 16-float (cache line) units when each thread gets at least one
  // line; otherwise (narrow tables) the table rows are split and every thread scans
  // all indices. Both keep each element's summation order.
  constexpr int64_t kLine = 16;
  const int64_t lines = (cols + kLine - 1) / kLine;
  if (lines >= threads) {
    vec::parallelRanges(cols, n_idx + rows, kLine, [&](int64_t c0, int64_t c1) { accumulate(0, rows, c0, c1); });
  } else {
    vec::parallelRanges(rows, n_idx + cols, 1, [&](int64_t r0, int64_t r1) { accumulate(r0, r1, 0, cols); });
  }
}

void addScatter(const float* a, const float* dy, const int32_t* idx, float* y, int64_t n_idx, int64_t rows,
                int64_t cols) {
  vec::checkSizes("addScatter", {n_idx, rows, cols});
  checkIndices("addScatter", idx, n_idx, rows);
  if (rows * cols == 0) return;
  // Each touched row's place in the buffer, in order of first appearance.
  std::vector<int64_t> place(static_cast<size_t>(rows), -1);
  std::vector<int64_t> rows_touched;  // by place
  int64_t touched = 0;
  for (int64_t i = 0; i < n_idx; ++i)
    if (place[static_cast<size_t>(idx[i])] < 0) {
      place[static_cast<size_t>(idx[i])] = touched++;
      rows_touched.push_back(idx[i]);
    }
  std::vector<float> sums(static_cast<size_t>(touched * cols), 0.0f);
  // scatterAdd's sums: every element in index order, threads owning column ranges.
  vec::parallelRanges(cols, n_idx, 16, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n_idx; ++i)
      addRow(sums.data() + place[static_cast<size_t>(idx[i])] * cols + c0, dy + i * cols + c0, c1 - c0);
  });
  const __m256 zero = _mm256_setzero_ps();
  if (a == y) {
    // In place: the touched rows alone, each by one thread.
    vec::parallelRanges(touched, cols, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) addRow(y + rows_touched[static_cast<size_t>(t)] * cols, sums.data() + t * cols, cols);
    });
    return;
  }
  vec::parallelRanges(rows, cols, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t at = place[static_cast<size_t>(r)];
      const float* s = at >= 0 ? sums.data() + at * cols : nullptr;
      const float* ar = a + r * cols;
      float* yr = y + r * cols;
      for (int64_t j = 0; j < cols; j += 8) {
        const int64_t k = cols - j;
        vec::storePart(yr + j, k, _mm256_add_ps(vec::loadPart(ar + j, k), s ? vec::loadPart(s + j, k) : zero));
      }
    }
  });
}

}  // namespace pgq::kernels
