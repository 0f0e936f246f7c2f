#pragma once
// `pgq roofline --gemms FILE.csv`: any GEMMs a user lists, estimated on a GPU hardware
// model as the recipe generator estimates them (plan/hardware.h estimateGpuGemm): bf16,
// FP8 with its operands already cast, and the cast of each operand.
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plan/hardware.h"

namespace pgq {

// The GEMMs of a CSV file whose header names the columns m, k and n (and optionally b,
// the batch of a batched GEMM; other columns are ignored, so a measured table reads as
// it is): [b, m, k, n] per row. Throws pgq::Error naming the file, the line and the field
// of a missing column, a row with another number of fields, a size that is not an
// integer in [1, 2^40] without leading zeros (negative, NaN, fractional, empty, `064`), or
// a GEMM of more than 2^52 multiply-adds. Fields are RFC 4180's (quotes may hold commas).
std::vector<std::array<int64_t, 4>> readGemmShapes(const std::string& path);
std::vector<std::array<int64_t, 4>> parseGemmShapes(const std::string& text, const std::string& path);

// One CSV line per GEMM: b,m,k,n,bf16_us,fp8_us,a_cast_us,b_cast_us,extrapolation
// (extrapolation: how far the shape lies outside the model's measured GEMMs, 1 inside;
// empty when the model has none), passed to `write` line by line after the header (a
// million rows are not held in memory). Throws pgq::Error when `hw` runs no FP8, before
// any line.
void writeGemmEstimatesCsv(const HardwareModel& hw, const std::vector<std::array<int64_t, 4>>& shapes,
                           const std::function<void(const std::string&)>& write);
// The same lines as one string.
std::string gemmEstimatesCsv(const HardwareModel& hw, const std::vector<std::array<int64_t, 4>>& shapes);

}  // namespace pgq
