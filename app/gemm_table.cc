#include "app/gemm_table.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/errors.h"
#include "support/file_io.h"
#include "runtime/metrics.h"

namespace pgq {
namespace {

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The line's fields as RFC 4180 reads them (a quoted field may hold commas: a name
// column "attn, qkv" split into two), each trimmed of blanks.
std::vector<std::string> fields(std::string_view line, const std::string& path, size_t line_no) {
  if (std::count(line.begin(), line.end(), '"') % 2 != 0)
    throw Error(fmt::format("{}:{}: a quoted field is not closed on its line, got '{}'", path, line_no, line));
  std::vector<std::string> out = splitCsv(line);
  for (std::string& f : out) f = std::string(trimmed(f));
  return out;
}

constexpr int64_t kMaxDim = int64_t{1} << 40;
// As a profile's GEMMs (checkGemmShapes): beyond this the time estimates lose their units.
constexpr int64_t kMaxMultiplyAdds = int64_t{1} << 52;

}  // namespace

std::vector<std::array<int64_t, 4>> parseGemmShapes(const std::string& text, const std::string& path) {
  std::vector<std::array<int64_t, 4>> shapes;
  std::vector<std::string> header;
  // Where b, m, k, n are among the header's columns (b optional: 1).
  std::array<std::optional<size_t>, 4> column;
  size_t line_no = 0, start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line = std::string_view(text).substr(start, end - start);
    if (start == 0 && line.starts_with("\xEF\xBB\xBF")) line.remove_prefix(3);  // a UTF-8 BOM (spreadsheets write one)
    line = trimmed(line);
    start = end + 1;
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    std::vector<std::string> f = fields(line, path, line_no);
    if (header.empty()) {
      header = f;
      for (size_t i = 0; i < 4; ++i) {
        const std::string_view name = std::string_view("bmkn").substr(i, 1);
        auto it = std::find(header.begin(), header.end(), name);
        if (it != header.end()) column[i] = static_cast<size_t>(it - header.begin());
        if (it != header.end() && std::find(it + 1, header.end(), name) != header.end())
          throw Error(fmt::format("{}:{}: field '{}': the header names it twice, got '{}'", path, line_no, name, line));
      }
      for (size_t i = 1; i < 4; ++i)
        if (!column[i])
          throw Error(fmt::format("{}:{}: field '{}': missing; the header must name the columns m, k and n (and "
                                  "optionally b), got '{}'",
                                  path, line_no, "bmkn"[i], line));
      continue;
    }
    if (f.size() != header.size())
      throw Error(fmt::format("{}:{}: expected {} fields as the header has, got {}", path, line_no, header.size(),
                              f.size()));
    std::array<int64_t, 4> shape{1, 1, 1, 1};
    for (size_t i = 0; i < 4; ++i) {
      if (!column[i]) continue;
      const std::string& value = f[*column[i]];
      int64_t v = 0;
      auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      // A leading zero is refused as on the command line and in YAML (`064` is octal there).
      if (ec != std::errc() || ptr != value.data() + value.size() || v < 1 || v > kMaxDim || value.front() == '0')
        throw Error(fmt::format("{}:{}: field '{}': expected an integer from 1 to 2^40 without leading zeros, got "
                                "'{}'",
                                path, line_no, "bmkn"[i], value));
      shape[i] = v;
    }
    // Each factor is at most 2^40: the products of two fit int64, and are checked before
    // the next factor multiplies them.
    int64_t multiply_adds = 1;
    for (int64_t d : shape) {
      if (d > kMaxMultiplyAdds / multiply_adds)
        throw Error(fmt::format("{}:{}: b x m x k x n = {} x {} x {} x {} is more than 2^52 multiply-adds", path,
                                line_no, shape[0], shape[1], shape[2], shape[3]));
      multiply_adds *= d;
    }
    shapes.push_back(shape);
  }
  if (header.empty())
    throw Error(fmt::format("{}: no header line (expected the columns m, k, n and optionally b)", path));
  if (shapes.empty()) throw Error(fmt::format("{}: lists no GEMM below its header", path));
  return shapes;
}

std::vector<std::array<int64_t, 4>> readGemmShapes(const std::string& path) {
  return parseGemmShapes(readTextFile(path, InputKind::kGemmShapes), path);
}

void writeGemmEstimatesCsv(const HardwareModel& hw, const std::vector<std::array<int64_t, 4>>& shapes,
                           const std::function<void(const std::string&)>& write) {
  if (hw.gemm_fp8 <= 0)
    throw Error(fmt::format("--gemms estimates bf16 and FP8 GEMMs: hardware '{}' runs no FP8 (formats: {})", hw.name,
                            fmt::join(hw.formats, ", ")));
  write("b,m,k,n,bf16_us,fp8_us,a_cast_us,b_cast_us,extrapolation\n");
  for (const std::array<int64_t, 4>& s : shapes) {
    GpuGemmEstimate e = estimateGpuGemm(hw, s);
    write(fmt::format("{},{},{},{},{:.2f},{:.2f},{:.2f},{:.2f},{}\n", s[0], s[1], s[2], s[3], e.bf16_us, e.fp8_us,
                      e.a_cast_us, e.b_cast_us, e.extrapolation > 0 ? fmt::format("{:.3g}", e.extrapolation) : ""));
  }
}

std::string gemmEstimatesCsv(const HardwareModel& hw, const std::vector<std::array<int64_t, 4>>& shapes) {
  std::string out;
  writeGemmEstimatesCsv(hw, shapes, [&](const std::string& line) { out += line; });
  return out;
}

}  // namespace pgq
