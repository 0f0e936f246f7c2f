#pragma once
// Data movement kernels on row-major f32 buffers: general transpose, row gather
// (embedding lookup) and its gradient, scatter-add. None of them computes anything
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

// y[i, :] = table[idx[i], :] for table [rows, cols] and y [n_idx, cols]. Throws
// KernelError when an index is outside [0, rows); nothing is written then.
void gather(const float* table, const int32_t* idx, float* y, int64_t n_idx, int64_t rows,
            int64_t cols);

// table_grad = 0, then table_grad[idx[i], :] += dy[i, :] for i in order. Threads own
// disjoint column (or table-row) ranges, so there are no races and every element is
// summed in the same order for any thread count. Throws like gather.
void scatterAdd(const float* dy, const int32_t* idx, float* table_grad, int64_t n_idx, int64_t rows,
                int64_t cols);

}  // namespace pgq::kernels
