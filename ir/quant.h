#pragma once
// Shared facts about the quantization ops, for passes and the runtime.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/shape.h"
#include "support/quant_format.h"

namespace pgq {

// Columns of a quant_stats row (one row per format). SQNR is the ratio
// E[x^2] / E[(Q(x) - x)^2]; fractions are of all elements. bias_sqnr is E[x^2] over the
// error as it sums along the contracting dim (kernels::coherentErrorMeanSquare), capped
// like sqnr; 0 unless the node has `bias` set.
enum class StatField : int {
  kSqnr, kMse, kMeanSquare, kAbsmax, kZeroFraction, kUnderflowFraction, kClippedFraction,
  kNonfiniteFraction, kBiasSqnr,
};
inline constexpr int kStatFields = 9;
inline constexpr std::array<std::string_view, kStatFields> kStatFieldNames = {
    "sqnr", "mse", "mean_square", "absmax", "zero_fraction", "underflow_fraction",
    "clipped_fraction", "nonfinite_fraction", "bias_sqnr"};

// Columns of an error_stats result: the SQNR of the approximation, E[ref^2] / E[(approx
// - ref)^2] (capped like quant_stats'), and its two terms, from which the parts of a
// value split over tensor-parallel devices combine into the SQNR of the whole.
enum class ErrorStatField : int { kSqnr, kMeanSquare, kMse };
inline constexpr int kErrorStatFields = 3;

// A GEMM operand seen as a matrix: `batch` matrices of `channels` (non-contracting)
// by `contract` (contracting) elements, whatever the order of the dims in memory.
struct QuantOperandShape {
  int64_t batch = 1;
  int64_t channels = 1;
  int64_t contract = 1;
};

// Throws pgq::Error unless contract_dims and batch_dims are valid, disjoint dims of
// `shape` (contract_dims non-empty).
QuantOperandShape quantOperandShape(const Shape& shape, const std::vector<int64_t>& contract_dims,
                                    const std::vector<int64_t>& batch_dims);

// Number of params floats (scales, then zero points) of `format` for such an operand.
int64_t quantParamCount(const QuantOperandShape& operand, const QuantFormat& format);

}  // namespace pgq
