#pragma once
// Data movement kernels on row-major f32 buffers: general transpose, slice, pad,
// concat, row gather (embedding lookup) and its gradient, scatter-add. None of them computes anything
// that could depend on the thread count: scatterAdd accumulates each output element
// in index order whatever the split.
#include <cstdint>
#include <span>

namespace pgq::kernels {

// y = x permuted: y's dim i is x's dim perm[i] (numpy/torch `permute` semantics), x has
// shape `dims`. y must not overlap x. Throws KernelError unless perm is a permutation
// of 0..dims.size()-1 and dims are >= 0.
//
// Size-1 dims are dropped and dims that stay adjacent are merged first, so e.g.
// [B,H,T,D] perm (0,1,3,2) runs as a batched 2D transpose [B*H,T,D] -> [B*H,D,T].
// Fast paths: swapping the last two dims (cache-blocked 8x8 AVX2 tiles), and any
// permutation that keeps the last dim in place such as [B,T,H,D] <-> [B,H,T,D]
// (perm 0,2,1,3; a copy of D-long rows). Other permutations use a generic loop.
void transpose(const float* x, float* y, std::span<const int64_t> dims,
               std::span<const int64_t> perm);

// y (shape y_dims) = the box of x (shape x_dims) that starts at `starts`, stride 1.
// y must not overlap x. Throws KernelError unless the ranks agree and the box lies
// inside x. Runs along the last dim are copied whole; trailing dims the box covers
// entirely merge into one run.
void slice(const float* x, float* y, std::span<const int64_t> x_dims, std::span<const int64_t> starts,
           std::span<const int64_t> y_dims);

// y (shape low[i] + x_dims[i] + high[i]) = zeros with x at offset `low`. y must not
// overlap x. Throws KernelError unless the ranks agree and low, high >= 0.
void pad(const float* x, float* y, std::span<const int64_t> x_dims, std::span<const int64_t> low,
         std::span<const int64_t> high);

// Concatenation viewed as [outer, a_inner] and [outer, b_inner] -> [outer, a_inner +
// b_inner]: each output row is a's row then b's. y must not overlap a or b.
void concat(const float* a, const float* b, float* y, int64_t outer, int64_t a_inner, int64_t b_inner);

// y[i, :] = table[idx[i], :] for table [rows, cols] and y [n_idx, cols]. Throws
// KernelError when an index is outside [0, rows); nothing is written then.
void gather(const float* table, const int32_t* idx, float* y, int64_t n_idx, int64_t rows,
            int64_t cols);

// table_grad = 0, then table_grad[idx[i], :] += dy[i, :] for i in order. Threads own
// disjoint column (or table-row) ranges, so there are no races and every element is
// summed in the same order for any thread count. Throws like gather.
void scatterAdd(const float* dy, const int32_t* idx, float* table_grad, int64_t n_idx, int64_t rows,
                int64_t cols);

// y = a + scatterAdd(dy, idx) for a and y [rows, cols], equal bit for bit to scatterAdd
// into a table and then the elementwise add: each touched row's dy rows are summed from
// 0 in index order in a buffer of the touched rows only, then added to a's row; an
// untouched row is a + 0. It reads a and writes y once, where the two kernels also wrote
// and read the whole table (a tied embedding's gradient: the vocabulary's rows, of which
// a batch touches a few hundred). With y == a (in place) only the touched rows are read
// and written: an untouched row keeps a's bits, where a + 0 would turn a -0 into +0 (the
// one difference from the two kernels). Throws like gather.
void addScatter(const float* a, const float* dy, const int32_t* idx, float* y, int64_t n_idx, int64_t rows,
                int64_t cols);

}  // namespace pgq::kernels
