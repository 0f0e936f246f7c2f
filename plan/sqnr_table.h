#pragma once
// The table a user inspects after profiling (the paper's step 2): one row per GEMM,
// sorted by the lower SQNR of its two inputs, in a chosen quantization format.
#include <optional>
#include <string>
#include <vector>

#include "plan/gemm_metric.h"
#include "plan/profile.h"

namespace pgq {

struct SqnrInput {
  OperandRole role = OperandRole::kActivation;
  double sqnr = 0;  // mean over the logged steps
  double db() const;
  double ln1p() const;  // ln(1 + SQNR), the scale of the paper's plots
};

struct SqnrRow {
  std::string label;
  GemmDirection direction = GemmDirection::kFwd;
  std::vector<int64_t> gemm_shape;  // [batch, M, K, N]
  std::vector<int64_t> device_shape;  // per device (tensor parallelism); = gemm_shape on one
  double intensity = 0;             // flop per byte
  SqnrInput lhs, rhs;
  // Every metric (plan/gemm_metric.h) of the GEMM with these formats, indexed by
  // Metric; NaN where the profile lacks its statistics (made without --profile-metrics).
  std::vector<double> metrics;
  double minSqnr() const { return std::min(lhs.sqnr, rhs.sqnr); }
};

// Rows for `format` (each operand must have been profiled in it; gradient operands in
// `gradient_format` when given), sorted by `sort` (lowest first). Throws pgq::Error
// naming the first operand that lacks the format, or when sorting by a metric the
// profile cannot give (requireMetric()).
std::vector<SqnrRow> sqnrRows(const Profile& profile, const QuantFormat& format,
                              const std::optional<QuantFormat>& gradient_format = std::nullopt,
                              Metric sort = Metric::kSqnr, const std::string& profile_path = "");
// The metrics with a value in at least one row (always sqnr first).
std::vector<Metric> metricsShown(const std::vector<SqnrRow>& rows);

// The same inputs in several formats side by side: one row per GEMM input with its SQNR
// in each column's format and its rank there (1 = lowest of all inputs). A column is a
// format scheme (support/quant_scheme.h: int8 means int8:channel:rtn; fp8, mxfp8, ...
// their formats with round to nearest, the gradient format for gradient operands) or
// one format text for every operand. Rows are sorted by the first column.
struct CompareRow {
  std::string label;
  GemmOperand side = GemmOperand::kLhs;
  OperandRole role = OperandRole::kActivation;
  GemmDirection direction = GemmDirection::kFwd;
  std::vector<QuantFormat> formats;  // per column: the format measured
  std::vector<double> sqnr;          // per column
  std::vector<int> rank;             // per column
  int maxRankShift() const;          // largest |rank - first column's rank|
};
struct SqnrComparison {
  std::vector<std::string> columns;
  std::vector<CompareRow> rows;
  // Spearman rank correlation of each column with the first (1 for the first).
  std::vector<double> spearman;
};
// Throws pgq::Error naming the first input that lacks a column's format and the
// --profile-formats value that records it.
SqnrComparison compareSqnr(const Profile& profile, const std::vector<std::string>& columns);
// `top`: the inputs listed individually (the lowest, then the largest rank shifts).
std::string sqnrComparisonMarkdown(const SqnrComparison& c, size_t top);
std::string sqnrComparisonCsv(const SqnrComparison& c);

// `format`: the title's format ("int8:channel:rtn", or with a gradient format
// "int8:channel:rtn, gradient operands in int8:channel:sr").
std::string sqnrTableMarkdown(const std::vector<SqnrRow>& rows, const std::string& format);
std::string sqnrTableCsv(const std::vector<SqnrRow>& rows);
// `gradient_format`: the gradient operands' format where it differs from `format` (a
// "gradient_format" field), else empty.
std::string sqnrTableJson(const std::vector<SqnrRow>& rows, const std::string& format,
                          const std::string& gradient_format = "");

// The scaling table (`pgq sqnr-table --scaling`): one row per GEMM operand, how often
// delayed scaling and predicted weight scales would have clipped it (ScalingStats).
struct ScalingRow {
  std::string label;
  GemmDirection direction = GemmDirection::kFwd;
  std::string side;  // lhs | rhs | out
  std::string role;  // weight | activation | gradient | output
  ScalingStats scaling;
};

// Rows of every operand, the one delayed scaling clipped by the largest ratio first
// (then the most often, then by predicted weight scales' clip fraction): a clip by 1.001
// saturates the top 0.1% of the range, one by 3 everything above a third of the
// largest value. Throws pgq::Error when an operand has no scaling record (a profile of
// one step, or from an older pgq).
std::vector<ScalingRow> scalingRows(const Profile& profile);

std::string scalingTableMarkdown(const std::vector<ScalingRow>& rows);
std::string scalingTableCsv(const std::vector<ScalingRow>& rows);
std::string scalingTableJson(const std::vector<ScalingRow>& rows);

}  // namespace pgq
