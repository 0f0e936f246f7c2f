#pragma once
// The table a user inspects after profiling (the paper's step 2): one row per GEMM,
// sorted by the lower SQNR of its two inputs, in a chosen quantization format.
#include <string>
#include <vector>

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
  double minSqnr() const { return std::min(lhs.sqnr, rhs.sqnr); }
};

// Rows for `format` (each operand must have been profiled in it), lowest first.
// Throws pgq::Error naming the first operand that lacks the format.
std::vector<SqnrRow> sqnrRows(const Profile& profile, const std::string& format);

std::string sqnrTableMarkdown(const std::vector<SqnrRow>& rows, const std::string& format);
std::string sqnrTableCsv(const std::vector<SqnrRow>& rows);
std::string sqnrTableJson(const std::vector<SqnrRow>& rows, const std::string& format);

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
