#pragma once
// What several pass tests share: a two-GEMM MLP in the IR text form, and the relative
// squared error between two outputs of the same computation.
#include <span>

namespace pgq::testing {

// x[64,32] -> up (w [32,48]) -> down (w2 [48,32]); GEMM labels "up" and "down".
inline const char* kMlp = R"(graph @mlp {
  %x = input() : f32[64,32]
  %w = parameter() : f32[32,48]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="up"} : f32[64,48]
  %w2 = parameter() : f32[48,32]
  %y = matmul(%h, %w2) {lhs_contract=[1], rhs_contract=[0], label="down"} : f32[64,32]
  return %y
}
)";

// sum (a - b)^2 / sum a^2: 0 when equal, 1/SQNR of b as an approximation of a.
inline double relativeSquaredError(std::span<const float> a, std::span<const float> b) {
  double err = 0, sig = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    sig += static_cast<double>(a[i]) * a[i];
  }
  return err / sig;
}

}  // namespace pgq::testing
