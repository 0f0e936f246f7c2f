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

}  // namespace pgq
