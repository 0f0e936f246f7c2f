#pragma once
// Rotary position embeddings (RoPE) with LLaMA's rotate-half pairing, on row-major f32
// [rows, seq, dim] buffers (rows = batch x heads): element i of the first half of a row
// and element i + dim/2 turn together by the angle t * theta^(-2i/dim), t the row's
// position in [0, seq):
//   y[i]         = x[i] cos - x[i + dim/2] sin
//   y[i + dim/2] = x[i + dim/2] cos + x[i] sin
// The inverse rotation uses -sin; it is both the rotation back and rope's gradient.
//
// The angles are computed once per (seq, dim, theta) in double and stored as f32
// cos/sin tables. Rows are independent and split among OpenMP threads; every element
// is computed the same way whatever the split, so results do not depend on the thread
// count.
#include <cstdint>
#include <vector>

namespace pgq::kernels {

enum class RopeRotation { kForward, kInverse };

// cos and sin of every angle, [seq, dim/2] each.
struct RopeTable {
  int64_t seq = 0;
  int64_t half = 0;
  std::vector<float> cos;
  std::vector<float> sin;
};

// Throws KernelError unless seq >= 0, dim >= 0 is even and theta > 0 is finite.
RopeTable ropeTable(int64_t seq, int64_t dim, double theta);

// y = x rotated, x and y [rows, table.seq, 2 * table.half]. y may alias x.
void rope(const float* x, float* y, int64_t rows, const RopeTable& table, RopeRotation rotation);

}  // namespace pgq::kernels
