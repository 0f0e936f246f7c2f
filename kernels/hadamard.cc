#include "kernels/hadamard.h"

#include <cstring>

#include "kernels/kernel_error.h"

namespace pgq::kernels {
namespace {

constexpr int kBlock = 16;

// splitmix64's finalizer: consecutive steps give unrelated sign patterns.
uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The normalized fast Walsh-Hadamard transform of 16 vectors of `width` floats, v[j] the
// j-th: v <- H v, H = H2 (x) H2 (x) H2 (x) H2 / 4, applied lane by lane (the inner loop
// over width vectorizes).
void hadamard16(float* const v[kBlock], int64_t width) {
  for (int h = 1; h < kBlock; h *= 2) {
    for (int i = 0; i < kBlock; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        float* a = v[j];
        float* b = v[j + h];
        for (int64_t c = 0; c < width; ++c) {
          const float x = a[c], y = b[c];
          a[c] = x + y;
          b[c] = x - y;
        }
      }
    }
  }
  for (int j = 0; j < kBlock; ++j)
    for (int64_t c = 0; c < width; ++c) v[j][c] *= 0.25f;
}

void applySigns(float* const v[kBlock], int64_t width, const float signs[kBlock]) {
  for (int j = 0; j < kBlock; ++j)
    for (int64_t c = 0; c < width; ++c) v[j][c] *= signs[j];
}

}  // namespace

void hadamardSigns(uint64_t step, float signs[16]) {
  const uint64_t bits = mix(step);
  for (int j = 0; j < kBlock; ++j) signs[j] = (bits >> j) & 1 ? -1.0f : 1.0f;
}

void hadamardTransform(std::span<const float> x, const OperandView& view, uint64_t step, bool inverse,
                       std::span<float> out) {
  view.validate();
  if (int64_t(x.size()) != view.elements() || int64_t(out.size()) != view.elements())
    throw KernelError::format("hadamardTransform: buffers of {} and {} elements, the view needs {}", x.size(),
                              out.size(), view.elements());
  if (view.contractLength() % kBlock != 0)
    throw KernelError::format(
        "hadamardTransform: the contracting length {} is not a multiple of {} (the transform's block)",
        view.contractLength(), kBlock);
  if (out.data() != x.data()) std::memcpy(out.data(), x.data(), x.size() * sizeof(float));
  float signs[kBlock];
  hadamardSigns(step, signs);
  // Forward y = H D x: signs first. Inverse x = D H y (H is its own inverse).
  auto transform = [&](float* const v[kBlock], int64_t width) {
    if (!inverse) applySigns(v, width, signs);
    hadamard16(v, width);
    if (inverse) applySigns(v, width, signs);
  };
  float* data = out.data();
  if (view.contract_along_cols) {
    // Each 16-block of a row is 16 scalars: width 1, pointers into the row.
    const int64_t blocks = view.batch * view.rows * (view.cols / kBlock);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      float* base = data + b * kBlock;
      float* v[kBlock];
      for (int j = 0; j < kBlock; ++j) v[j] = base + j;
      transform(v, 1);
    }
  } else {
    // Contracting down the rows: 16 consecutive rows are the 16 vectors, transformed
    // across all columns at once.
    const int64_t groups = view.batch * (view.rows / kBlock);
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < groups; ++g) {
      float* base = data + g * kBlock * view.cols;
      float* v[kBlock];
      for (int j = 0; j < kBlock; ++j) v[j] = base + j * view.cols;
      transform(v, view.cols);
    }
  }
}

}  // namespace pgq::kernels
