#pragma once
// Reduction of the middle dim of a row-major [outer, mid, inner] f32 buffer to
// [outer, inner]. The executor maps any set of contiguous reduced axes onto this form.
//
// Two shapes are the hot ones and both are streaming: inner == 1 (a row reduce, e.g.
// per-token statistics) and outer == 1 (a column reduce, e.g. summing a [tokens, d]
// bias gradient over tokens). Sums fold f32 partials of 16 terms into f64. Each output
// is always accumulated in the same order, so results are identical for any thread
// count.
#include <cstdint>

namespace pgq::kernels {

enum class ReduceOp {
  kSum,
  kMax,   // NaN if any input is NaN (like torch.amax); -inf when mid == 0
  kMean,  // NaN when mid == 0
};

void reduce(ReduceOp op, const float* x, float* y, int64_t outer, int64_t mid, int64_t inner);

// max |x[i]| over the finite elements (0 when there is none): delayed scaling's amax.
// A max is exact in any order, so the result does not depend on the thread count.
float finiteAbsmax(const float* x, int64_t n);

// How far `approx` is from `reference` (n elements each), over the pairs where both are
// finite (the others take no part): mean_square E[ref^2], mse E[(approx - ref)^2] and
// sqnr = mean_square / mse, capped at kSqnrCap (quant_stats.h), kSqnrCap when mse is 0
// (also when no pair is finite). Squares are summed in double over fixed chunks of the
// data, combined in chunk order: the result does not depend on the thread count.
struct ErrorStats {
  int64_t finite_count = 0;
  double mean_square = 0;
  double mse = 0;
  double sqnr = 0;
};
ErrorStats errorStats(const float* reference, const float* approx, int64_t n);

}  // namespace pgq::kernels
