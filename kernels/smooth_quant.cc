#include "kernels/smooth_quant.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "kernels/kernel_error.h"

namespace pgq::kernels {
namespace {

void checkOperand(const char* what, const char* name, std::span<const float> x,
                  const OperandView& view) {
  view.validate();
  if (int64_t(x.size()) != view.elements()) {
    throw KernelError::format("{}: {} has {} elements, its view {}x{}x{} needs {}", what, name,
                              x.size(), view.batch, view.rows, view.cols, view.elements());
  }
}

void checkPair(const char* what, std::span<const float> a, const OperandView& view_a,
               std::span<const float> b, const OperandView& view_b, size_t s_size) {
  checkOperand(what, "A", a, view_a);
  checkOperand(what, "B", b, view_b);
  if (view_a.contractLength() != view_b.contractLength()) {
    throw KernelError::format("{}: A contracts over {} and B over {} elements; expected equal K",
                              what, view_a.contractLength(), view_b.contractLength());
  }
  if (int64_t(s_size) != view_a.contractLength()) {
    throw KernelError::format("{}: factor buffer has {} elements, expected K = {}", what, s_size,
                              view_a.contractLength());
  }
}

// max |x| of each contracting channel over the finite values.
std::vector<float> channelAbsMax(std::span<const float> x, const OperandView& view) {
  std::vector<float> amax(view.contractLength(), 0.0f);
  for (int64_t b = 0; b < view.batch; ++b) {
    for (int64_t r = 0; r < view.rows; ++r) {
      const float* row = x.data() + (b * view.rows + r) * view.cols;
      if (view.contract_along_cols) {
        for (int64_t c = 0; c < view.cols; ++c) {
          float v = std::fabs(row[c]);
          if (v <= FLT_MAX) amax[c] = std::max(amax[c], v);
        }
      } else {
        for (int64_t c = 0; c < view.cols; ++c) {
          float v = std::fabs(row[c]);
          if (v <= FLT_MAX) amax[r] = std::max(amax[r], v);
        }
      }
    }
  }
  return amax;
}

}  // namespace

void smoothQuantFactors(std::span<const float> a, const OperandView& view_a,
                        std::span<const float> b, const OperandView& view_b, float alpha,
                        std::span<float> s) {
  checkPair("smoothQuantFactors", a, view_a, b, view_b, s.size());
  if (!(alpha >= 0.0f && alpha <= 1.0f)) {
    throw KernelError::format("smoothQuantFactors: alpha = {} is out of range, expected [0, 1]",
                              alpha);
  }
  std::vector<float> amax = channelAbsMax(a, view_a);
  std::vector<float> bmax = channelAbsMax(b, view_b);
  for (size_t k = 0; k < s.size(); ++k) {
    double factor = 1.0;
    if (amax[k] > 0.0f && bmax[k] > 0.0f) {
      factor = std::pow(double(amax[k]), alpha) / std::pow(double(bmax[k]), 1.0 - alpha);
    }
    s[k] = (factor > 0.0 && factor <= FLT_MAX && float(factor) > 0.0f) ? float(factor) : 1.0f;
  }
}

}  // namespace pgq::kernels
