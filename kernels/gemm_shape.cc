#include "kernels/gemm_shape.h"

#include "kernels/kernel_error.h"

namespace pgq::kernels {
namespace {

// Element counts are int64_t and so are the products the kernels form from them; a
// product that overflows would be undefined behaviour, so it is refused up front.
int64_t checkedProduct(int64_t a, int64_t b, int64_t c, const char* what) {
  int64_t ab = 0;
  int64_t abc = 0;
  if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc)) {
    throw KernelError::format("{}: {} x {} x {} elements overflow int64", what, a, b, c);
  }
  return abc;
}

}  // namespace

void GemmShape::validate() const {
  if (batch < 1 || m < 1 || n < 1 || k < 1) {
    throw KernelError::format("GEMM shape batch={} m={} n={} k={}: every dimension must be >= 1",
                              batch, m, n, k);
  }
  checkedProduct(batch, m, k, "GEMM operand A");
  checkedProduct(batch, k, n, "GEMM operand B");
  checkedProduct(batch, m, n, "GEMM output C");
}

void OperandView::validate() const {
  if (batch < 1 || rows < 1 || cols < 1) {
    throw KernelError::format("operand view batch={} rows={} cols={}: every dimension must be >= 1",
                              batch, rows, cols);
  }
  checkedProduct(batch, rows, cols, "operand view");
}

OperandView lhsView(const GemmShape& shape) {
  // A is [M,K] (K along the columns) unless stored transposed as [K,M].
  if (shape.trans_a) return {shape.batch, shape.k, shape.m, false};
  return {shape.batch, shape.m, shape.k, true};
}

OperandView rhsView(const GemmShape& shape) {
  // B is [K,N] (K along the rows) unless stored transposed as [N,K].
  if (shape.trans_b) return {shape.batch, shape.n, shape.k, true};
  return {shape.batch, shape.k, shape.n, false};
}

}  // namespace pgq::kernels
