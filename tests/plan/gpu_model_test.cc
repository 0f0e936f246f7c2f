// The GPU hardware models against what an H100 and an H200 measured (tests/data/gpu, the
// copy of ../shared/gpu): every GEMM, cast and flash-attention row estimated by pgq
// (estimateGpuGemm, the numbers `pgq roofline --gemms` prints and the recipe generator
// uses), with the bounds of issue 31. The presets were fitted (scripts/gpu_model.py) on
// the shapes of two models, medium and llama-7b; gpt2-124m and llama-1b are held out.
// The figures printed here are the ones docs/PERFORMANCE.md quotes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "plan/hardware.h"

namespace pgq {
namespace {

const std::string kData = PGQ_SOURCE_DIR "/tests/data/gpu/";
const std::set<std::string> kFitModels = {"medium", "llama-7b"};

// A CSV file as rows of column -> text.
std::vector<std::map<std::string, std::string>> readCsv(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  auto split = [](const std::string& line) {
    std::vector<std::string> out;
    std::stringstream s(line);
    for (std::string field; std::getline(s, field, ',');) out.push_back(field);
    if (!line.empty() && line.back() == ',') out.emplace_back();
    return out;
  };
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header = split(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    std::vector<std::string> f = split(line);
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size() && i < f.size(); ++i) row[header[i]] = f[i];
    rows.push_back(row);
  }
  return rows;
}

struct Row {
  std::array<int64_t, 4> shape{};
  double bf16_us = 0, fp8_us = 0;  // fp8 0: not measured
  std::string model;               // from shapes.json
};

std::vector<Row> measuredGemms(const std::string& device) {
  std::map<std::array<int64_t, 4>, std::string> model_of;
  for (const YAML::Node& r : YAML::LoadFile(kData + "shapes.json"))
    model_of[{r["b"].as<int64_t>(), r["m"].as<int64_t>(), r["k"].as<int64_t>(), r["n"].as<int64_t>()}] =
        r["model"].as<std::string>();
  std::vector<Row> rows;
  for (auto& r : readCsv(kData + device + "/gemm.csv")) {
    Row row;
    row.shape = {std::stoll(r["b"]), std::stoll(r["m"]), std::stoll(r["k"]), std::stoll(r["n"])};
    row.bf16_us = std::stod(r["bf16_us"]);
    row.fp8_us = r["fp8_fast_us"].empty() ? 0.0 : std::stod(r["fp8_fast_us"]);
    // The two probe shapes (64^3, 256^3) belong to no model: fitted, never scored.
    if (auto it = model_of.find(row.shape); it != model_of.end()) {
      row.model = it->second;
      rows.push_back(row);
    }
  }
  return rows;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return (v[(n - 1) / 2] + v[n / 2]) / 2;
}

// numpy's default (linear) percentile.
double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = static_cast<double>(v.size() - 1) * q / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

struct Errors {
  size_t gemms = 0, narrow = 0;
  double narrow_bf16 = 0, narrow_fp8 = 0, speedup_p90 = 0, all_bf16 = 0, all_fp8 = 0;
};

Errors errorsOf(const HardwareModel& hw, const std::vector<Row>& rows) {
  std::vector<double> nb, n8, sp, ab, a8;
  size_t narrow = 0;
  for (const Row& r : rows) {
    GpuGemmEstimate e = estimateGpuGemm(hw, r.shape);
    const bool is_narrow = std::min({r.shape[1], r.shape[2], r.shape[3]}) <= 1024;
    narrow += is_narrow;
    const double eb = std::abs(e.bf16_us / r.bf16_us - 1);
    ab.push_back(eb);
    if (is_narrow) nb.push_back(eb);
    if (r.fp8_us <= 0) continue;
    const double e8 = std::abs(e.fp8_us / r.fp8_us - 1);
    a8.push_back(e8);
    if (is_narrow) n8.push_back(e8);
    sp.push_back(std::abs((e.bf16_us / e.fp8_us) / (r.bf16_us / r.fp8_us) - 1));
  }
  return {rows.size(), narrow, median(nb), median(n8), percentile(sp, 90), median(ab), median(a8)};
}

void print(const std::string& device, const std::string& label, const Errors& e) {
  std::printf("%s %-8s %2zu GEMMs (%2zu narrow): narrow MAPE bf16 %.1f%% fp8 %.1f%%; FP8 speedup p90 %.1f%%; all "
              "MAPE bf16 %.1f%% fp8 %.1f%%\n",
              device.c_str(), label.c_str(), e.gemms, e.narrow, 100 * e.narrow_bf16, 100 * e.narrow_fp8,
              100 * e.speedup_p90, 100 * e.all_bf16, 100 * e.all_fp8);
}

struct Device {
  const char* folder;
  const char* preset;
};
constexpr Device kDevices[] = {{"h100", "h100-sxm"}, {"h200", "h200"}};

TEST(GpuModel, PredictsTheMeasuredGemms) {
  for (const Device& d : kDevices) {
    SCOPED_TRACE(d.preset);
    HardwareModel hw = loadHardwareModel(d.preset);
    std::vector<Row> rows = measuredGemms(d.folder), fitted, held_out;
    ASSERT_EQ(rows.size(), 49u);
    for (const Row& r : rows) (kFitModels.count(r.model) ? fitted : held_out).push_back(r);
    Errors all = errorsOf(hw, rows), held = errorsOf(hw, held_out);
    print(d.folder, "fitted", errorsOf(hw, fitted));
    print(d.folder, "held out", held);
    print(d.folder, "all", all);
    // Issue 31's bounds (stated for the H100; the H200 meets them too), over every shape
    // and over the held-out models' alone.
    for (const Errors& e : {all, held}) {
      EXPECT_LE(e.narrow_bf16, 0.10);
      EXPECT_LE(e.narrow_fp8, 0.10);
      EXPECT_LE(e.speedup_p90, 0.15);
    }
  }
}

TEST(GpuModel, PredictsTheMeasuredCasts) {
  for (const Device& d : kDevices) {
    SCOPED_TRACE(d.preset);
    HardwareModel hw = loadHardwareModel(d.preset);
    double worst = 0;
    size_t big = 0;
    for (auto& r : readCsv(kData + std::string(d.folder) + "/cast2.csv")) {
      const int64_t rows = std::stoll(r["rows"]), cols = std::stoll(r["cols"]);
      if (rows * cols <= (int64_t{1} << 20)) continue;
      ++big;
      // The cast of an [rows, cols] operand: a's of a rows x cols x 1 GEMM.
      const double estimate = estimateGpuGemm(hw, {1, rows, cols, 1}).a_cast_us;
      worst = std::max(worst, std::abs(estimate / std::stod(r["delayed_us"]) - 1));
    }
    std::printf("%s casts above 1M elements: %zu, largest error %.1f%%\n", d.folder, big, 100 * worst);
    EXPECT_GT(big, 30u);
    EXPECT_LE(worst, 0.15);
  }
}

TEST(GpuModel, FlashAttentionFromItsFlops) {
  for (const Device& d : kDevices) {
    SCOPED_TRACE(d.preset);
    HardwareModel hw = loadHardwareModel(d.preset);
    for (auto& r : readCsv(kData + std::string(d.folder) + "/attn.csv")) {
      const int64_t heads = std::stoll(r["B"]) * std::stoll(r["H"]), t = std::stoll(r["T"]), dh = std::stoll(r["Dh"]);
      const double fwd = std::stod(r["sdpa_fwd_us"]), bwd = std::stod(r["sdpa_fwd_bwd_us"]) - fwd;
      const double ef = estimateFlashAttentionUs(hw, heads, t, dh, false) / fwd - 1;
      const double eb = estimateFlashAttentionUs(hw, heads, t, dh, true) / bwd - 1;
      std::printf("%s attention %-12s fwd %+.1f%% bwd %+.1f%%\n", d.folder, r["case"].c_str(), 100 * ef, 100 * eb);
      // One efficiency each way does not follow the head dim (64 runs slower per flop
      // than 128): within 30%, which the six batched GEMMs it replaces are not.
      EXPECT_LE(std::abs(ef), 0.30);
      EXPECT_LE(std::abs(eb), 0.30);
    }
  }
}

}  // namespace
}  // namespace pgq
