#pragma once
// Internal to kernels/: the two wrappers of an emulated format around the 1-D kernels of
// float_quant_core.h. A 2-D format (block<N>x<N>) keeps one scale per N x N tile; the
// kernels run it as the 1-D format of the same block with each block of a channel taking
// its tile's scale. A format with a Hadamard transform (hadamard.h) quantizes the
// transformed values; the value the GEMM reads is transformed back, which leaves the
// product of two transformed operands as it would be in the transformed basis. Not part
// of the public API.
#include <span>
#include <vector>

#include "kernels/gemm_shape.h"
#include "kernels/hadamard.h"
#include "kernels/quant_format.h"

namespace pgq::kernels::detail {

// The format the 1-D kernels run: no 2-D tiles, no transform.
inline QuantFormat rowFormat(const QuantFormat& format) {
  QuantFormat row = format;
  row.block2d = false;
  row.hadamard = false;
  return row;
}

// The tile of 1-D group g = (b * channels + c) * blocks + j of `view` (2-D formats).
inline int64_t tileOfGroup(const OperandView& view, const QuantFormat& format, int64_t g) {
  const int64_t blocks = quantBlockCount(format, view.contractLength());
  const int64_t tiles = quantBlockCount(format, view.channels());
  const int64_t j = g % blocks, bc = g / blocks;
  const int64_t b = bc / view.channels(), c = bc % view.channels();
  return (b * tiles + c / format.block) * blocks + j;
}

// One scale per 1-D group of rowFormat(format), each its tile's.
inline std::vector<float> expandTileParams(const OperandView& view, const QuantFormat& format,
                                           std::span<const float> params) {
  const QuantFormat row = rowFormat(format);
  std::vector<float> expanded(size_t(quantGroupCount(view, row)));
  for (int64_t g = 0; g < int64_t(expanded.size()); ++g) expanded[g] = params[tileOfGroup(view, format, g)];
  return expanded;
}

// x transformed as `format` says (sr.offset is the step whose signs it uses).
inline std::vector<float> hadamardCopy(std::span<const float> x, const OperandView& view, uint64_t step) {
  std::vector<float> y(x.size());
  hadamardTransform(x, view, step, /*inverse=*/false, y);
  return y;
}

}  // namespace pgq::kernels::detail
