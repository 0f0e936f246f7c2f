// Quantizer throughput at 1 and 2 threads (the benchmark argument):
//   params      computeQuantParams (absmax per channel): 4 bytes read per element
//   rtn, sr     quantize with round-to-nearest / stochastic rounding: 4 bytes read + 1
//               written per element (the brief's 15 GB/s per thread counts these 5)
//   dynamic     quantizeDynamic (params + rtn, fused per row where possible): what one
//               operand costs per step
//   stats_rtn, stats_sr   quantStats (params + quantize/dequantize + sums), 4 bytes per
//               element counted once although it reads the tensor twice
//   grad4, grad4_each   a gradient operand as stage (i) measures it on a CPU without
//               VNNI: scales and statistics in int8 and int7 per channel, each with
//               rtn and sr, through the many-format calls (one scales pass, one
//               statistics pass) or format by format; 4 bytes per element once
//   grad2, fwd1   stage (i)'s statistics on a VNNI CPU: a gradient operand (int8 per
//               channel, rtn and sr) and a forward operand (int8 per channel, rtn), each
//               one scales pass and one many-format statistics call, as the statistics
//               node runs them; 4 bytes per element once. grad2_256, fwd1_256: the same
//               with pgq's 512-bit paths off (setAvx512Kernels), for the ratio
//   coherent    coherentErrorMeanSquare in int8 rtn with precomputed params (the
//               bias-aware SQNR of --profile-metrics: quantize/dequantize, then the
//               error's sums along the contracting dim), 4 bytes per element
// Emulated formats (kernels/float_quant.h), fakeQuantize with precomputed scales, 4 bytes
// read + 4 written per element:
//   e4m3_rtn    e4m3:tensor:rtn          e5m2_sr   e5m2:tensor:sr
//   mxfp8_rtn   mxfp8_e4m3 (e4m3:block32:rtn:scale=e8m0)
//   stats_e4m3, stats_mxfp8   quantStats in e4m3:tensor:rtn and mxfp8_e4m3 (4 bytes)
// on an activation [2048, 1024] (per-row scales), a weight [1024, 1024] (per-column
// scales) and the small model's activation [2048, 256] (fits in L2+L3); params, dynamic,
// grad4, grad2 and grad2_256 also on a weight gradient's operand [2048, 8192] (per-column
// scales, 64 MB: read from memory, as in a step, like `medium`'s logits gradient). After the usual
// output, a table gives GB/s per thread and the SR / RTN time ratio, and a second one the
// emulated rows with the ratios of fakeQuantize to int8 rtn in elements per second.
// srnoise/<isa>: the noise generator of stochastic rounding alone (kernels/sr_noise.h,
// ARS-5), 2^20 elements' worth of words per iteration, one thread, per implementation
// the CPU supports (items = elements).
//
//   build-quant/bench/quant_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu_isa.h"
#include "kernels/float_quant.h"
#include "kernels/threads.h"
#include "kernels/quant_stats.h"
#include "kernels/quantize.h"
#include "kernels/sr_noise.h"

namespace pgq::kernels {
namespace {

struct NamedView {
  const char* name;
  OperandView view;
  bool beyond_caches = false;  // only the modes that read x from memory once per call
};

const NamedView kViews[] = {
    {"act2048x1024", {1, 2048, 1024, true}},
    {"weight1024x1024", {1, 1024, 1024, false}},
    {"act2048x256", {1, 2048, 256, true}},
    {"wgrad2048x8192", {1, 2048, 8192, false}, true},
};

enum class Mode {
  kParams, kRtn, kSr, kDynamic, kStatsRtn, kStatsSr,
  kE4m3Rtn, kE5m2Sr, kMxfp8Rtn, kStatsE4m3, kStatsMxfp8, kCoherent, kGrad4, kGrad4Each,
  kGrad2, kGrad2Narrow, kFwd1, kFwd1Narrow,
};
const char* modeName(Mode mode) {
  switch (mode) {
    case Mode::kParams: return "params";
    case Mode::kRtn: return "rtn";
    case Mode::kSr: return "sr";
    case Mode::kDynamic: return "dynamic";
    case Mode::kStatsRtn: return "stats_rtn";
    case Mode::kStatsSr: return "stats_sr";
    case Mode::kE4m3Rtn: return "e4m3_rtn";
    case Mode::kE5m2Sr: return "e5m2_sr";
    case Mode::kMxfp8Rtn: return "mxfp8_rtn";
    case Mode::kStatsE4m3: return "stats_e4m3";
    case Mode::kStatsMxfp8: return "stats_mxfp8";
    case Mode::kCoherent: return "coherent";
    case Mode::kGrad4: return "grad4";
    case Mode::kGrad4Each: return "grad4_each";
    case Mode::kGrad2: return "grad2";
    case Mode::kGrad2Narrow: return "grad2_256";
    case Mode::kFwd1: return "fwd1";
    case Mode::kFwd1Narrow: return "fwd1_256";
  }
  return "?";
}

QuantFormat formatOf(Mode mode) {
  switch (mode) {
    case Mode::kSr:
    case Mode::kStatsSr: return perChannelFormat(8, Rounding::kStochastic);
    case Mode::kE4m3Rtn:
    case Mode::kStatsE4m3: return QuantFormat::parse("e4m3:tensor:rtn");
    case Mode::kE5m2Sr: return QuantFormat::parse("e5m2:tensor:sr");
    case Mode::kMxfp8Rtn:
    case Mode::kStatsMxfp8: return QuantFormat::parse("mxfp8_e4m3");
    default: return perChannelFormat(8);
  }
}

// The four formats of a gradient operand's statistics without VNNI, and their scales:
// rtn and sr share scales (cpu_backend.cc computes one buffer per rounding-free format).
void gradientStats(std::span<const float> x, const OperandView& view, bool together, uint64_t step) {
  static const QuantFormat scales[] = {perChannelFormat(8), perChannelFormat(7)};
  static const QuantFormat formats[] = {perChannelFormat(8), perChannelFormat(7),
                                        perChannelFormat(8, Rounding::kStochastic),
                                        perChannelFormat(7, Rounding::kStochastic)};
  std::vector<float> p8(quantParamCount(view, scales[0])), p7(quantParamCount(view, scales[1]));
  const SrStream sr{7, step};
  if (together) {
    const std::span<float> out[] = {p8, p7};
    computeQuantParams(x, view, scales, out, sr);
    const std::span<const float> in[] = {p8, p7, p8, p7};
    benchmark::DoNotOptimize(quantStatsWithParams(x, view, formats, in, sr, true));
    return;
  }
  computeQuantParams(x, view, scales[0], p8, sr);
  computeQuantParams(x, view, scales[1], p7, sr);
  for (int f = 0; f < 4; ++f)
    benchmark::DoNotOptimize(quantStatsWithParams(x, view, formats[f], f % 2 == 0 ? p8 : p7, sr, true));
}

// Stage (i)'s statistics of one operand on a VNNI CPU (cpu_backend.cc's statistics node):
// int8 per channel, with sr as well for a gradient; one scales buffer for both roundings.
void stageStats(std::span<const float> x, const OperandView& view, bool gradient, uint64_t step) {
  static const QuantFormat formats[] = {perChannelFormat(8), perChannelFormat(8, Rounding::kStochastic)};
  std::vector<float> p8(quantParamCount(view, formats[0]));
  const SrStream sr{7, step};
  computeQuantParams(x, view, formats[0], p8, sr);
  const std::span<const float> in[] = {p8, p8};
  benchmark::DoNotOptimize(
      quantStatsWithParams(x, view, std::span(formats, gradient ? 2 : 1), std::span(in, gradient ? 2 : 1), sr, true));
}

void runQuant(benchmark::State& state, OperandView view, Mode mode) {
  omp_set_num_threads(int(state.range(0)));
  std::mt19937 gen(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(view.elements());
  for (float& v : x) v = dist(gen);
  const QuantFormat format = formatOf(mode);
  std::vector<float> params(quantParamCount(view, format));
  std::vector<int8_t> q(x.size());
  std::vector<float> fake(format.isEmulated() ? x.size() : 0);
  computeQuantParams(x, view, format, params);
  uint64_t step = 0;
  const bool narrow = mode == Mode::kGrad2Narrow || mode == Mode::kFwd1Narrow;
  struct Wide {
    bool was = avx512Kernels();
    ~Wide() { setAvx512Kernels(was); }
  } restore;
  if (narrow) setAvx512Kernels(false);
  for (auto _ : state) {
    switch (mode) {
      case Mode::kParams: computeQuantParams(x, view, format, params); break;
      case Mode::kRtn:
      case Mode::kSr: quantize(x, view, format, params, q, {7, step++}); break;
      case Mode::kDynamic: quantizeDynamic(x, view, format, params, q); break;
      case Mode::kStatsRtn:
      case Mode::kStatsSr:
      case Mode::kStatsE4m3:
      case Mode::kStatsMxfp8:
        benchmark::DoNotOptimize(quantStats(x, view, format, {7, step++}));
        break;
      case Mode::kE4m3Rtn:
      case Mode::kE5m2Sr:
      case Mode::kMxfp8Rtn: fakeQuantize(x, view, format, params, fake, {7, step++}); break;
      case Mode::kCoherent: benchmark::DoNotOptimize(coherentErrorMeanSquare(x, view, format, params)); break;
      case Mode::kGrad4:
      case Mode::kGrad4Each: gradientStats(x, view, mode == Mode::kGrad4, step++); break;
      case Mode::kGrad2:
      case Mode::kGrad2Narrow: stageStats(x, view, true, step++); break;
      case Mode::kFwd1:
      case Mode::kFwd1Narrow: stageStats(x, view, false, step++); break;
    }
    benchmark::DoNotOptimize(q.data());
    benchmark::DoNotOptimize(fake.data());
    benchmark::ClobberMemory();
  }
  const bool writes = mode == Mode::kRtn || mode == Mode::kSr || mode == Mode::kDynamic;
  const bool fakes = mode == Mode::kE4m3Rtn || mode == Mode::kE5m2Sr || mode == Mode::kMxfp8Rtn;
  state.SetBytesProcessed(state.iterations() * view.elements() * (fakes ? 8 : writes ? 5 : 4));
}

void runNoise(benchmark::State& state, SrNoiseIsa isa) {
  constexpr int64_t kElements = int64_t(1) << 20;
  std::vector<uint32_t> words(kElements / 2);
  uint64_t step = 0;
  for (auto _ : state) {
    SrNoise(7, step++, isa).fill(0, int(kElements / 8), words.data());
    benchmark::DoNotOptimize(words.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

// Prints the usual console output, then GB/s per thread and SR / RTN.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration && run.aggregate_name != "median") continue;
      // "<view>/<mode>/threads:<t>/real_time"; the srnoise runs are not in the table.
      std::string name = run.benchmark_name();
      if (name.find("/threads:") == std::string::npos) continue;
      size_t a = name.find('/'), b = name.find('/', a + 1), c = name.find('/', b + 1);
      std::string key = name.substr(0, a) + " " + name.substr(b + 1, c - b - 1);
      int threads = std::stoi(name.substr(b + 1 + 8, c - b - 9));
      auto it = run.counters.find("bytes_per_second");
      if (it == run.counters.end()) continue;
      gbps_[key][name.substr(a + 1, b - a - 1)] = it->second.value / 1e9 / threads;
      if (std::find(order_.begin(), order_.end(), key) == order_.end()) order_.push_back(key);
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nGB/s per thread\n%-28s %7s %7s %7s %8s %9s %8s %8s %8s\n", "tensor threads",
                "params", "rtn", "sr", "dynamic", "stats_rtn", "stats_sr", "coherent", "sr/rtn");
    for (const std::string& key : order_) {
      auto& g = gbps_[key];
      std::printf("%-28s %7.1f %7.1f %7.1f %8.1f %9.1f %8.1f %8.1f %7.2fx\n", key.c_str(), g["params"],
                  g["rtn"], g["sr"], g["dynamic"], g["stats_rtn"], g["stats_sr"], g["coherent"],
                  g["sr"] > 0 ? g["rtn"] / g["sr"] : 0.0);
    }
    // fakeQuantize moves 8 bytes per element, quantize 5: the ratios are elements per
    // second against int8 rtn.
    std::printf("\nEmulated formats, GB/s per thread; elements/s vs int8 rtn\n"
                "%-28s %8s %8s %9s %10s %11s %6s %6s %6s\n",
                "tensor threads", "e4m3_rtn", "e5m2_sr", "mxfp8_rtn", "stats_e4m3", "stats_mxfp8",
                "e4m3", "e5m2sr", "mxfp8");
    for (const std::string& key : order_) {
      auto& g = gbps_[key];
      if (g["e4m3_rtn"] + g["e5m2_sr"] + g["mxfp8_rtn"] + g["stats_e4m3"] + g["stats_mxfp8"] == 0) continue;
      auto per_element = [&](const char* mode) {
        return g["rtn"] > 0 ? (g[mode] / 8.0) / (g["rtn"] / 5.0) : 0.0;
      };
      std::printf("%-28s %8.1f %8.1f %9.1f %10.1f %11.1f %5.2fx %5.2fx %5.2fx\n", key.c_str(),
                  g["e4m3_rtn"], g["e5m2_sr"], g["mxfp8_rtn"], g["stats_e4m3"], g["stats_mxfp8"],
                  per_element("e4m3_rtn"), per_element("e5m2_sr"), per_element("mxfp8_rtn"));
    }
    std::printf("\nA gradient operand's statistics without VNNI (int8 and int7, rtn and sr), GB/s per thread\n"
                "%-28s %8s %11s %9s\n", "tensor threads", "grad4", "grad4_each", "speedup");
    for (const std::string& key : order_) {
      auto& g = gbps_[key];
      if (g["grad4"] == 0) continue;
      if (g["grad4_each"] == 0) {
        std::printf("%-28s %8.2f %11s %9s\n", key.c_str(), g["grad4"], "-", "-");
        continue;
      }
      std::printf("%-28s %8.2f %11.2f %8.2fx\n", key.c_str(), g["grad4"], g["grad4_each"], g["grad4"] / g["grad4_each"]);
    }
    std::printf("\nStage (i)'s statistics on a VNNI CPU, GB/s per thread, with pgq's 512-bit paths and without\n"
                "%-28s %8s %9s %7s %8s %9s %7s\n", "tensor threads", "grad2", "grad2_256", "ratio", "fwd1", "fwd1_256",
                "ratio");
    for (const std::string& key : order_) {
      auto& g = gbps_[key];
      if (g["grad2"] == 0 || g["grad2_256"] == 0) continue;
      std::printf("%-28s %8.2f %9.2f %6.2fx %8.2f %9.2f %6.2fx\n", key.c_str(), g["grad2"], g["grad2_256"],
                  g["grad2"] / g["grad2_256"], g["fwd1"], g["fwd1_256"], g["fwd1_256"] > 0 ? g["fwd1"] / g["fwd1_256"] : 0.0);
    }
  }

 private:
  std::map<std::string, std::map<std::string, double>> gbps_;
  std::vector<std::string> order_;
};

}  // namespace
}  // namespace pgq::kernels

int main(int argc, char** argv) {
  pgq::kernels::useSpinWaitPolicy(argv);  // as pgq runs (kernels/threads.h)
  using namespace pgq::kernels;
  for (const NamedView& v : kViews) {
    for (Mode mode : {Mode::kParams, Mode::kRtn, Mode::kSr, Mode::kDynamic, Mode::kStatsRtn,
                      Mode::kStatsSr, Mode::kE4m3Rtn, Mode::kE5m2Sr, Mode::kMxfp8Rtn,
                      Mode::kStatsE4m3, Mode::kStatsMxfp8, Mode::kCoherent, Mode::kGrad4,
                      Mode::kGrad4Each, Mode::kGrad2, Mode::kGrad2Narrow, Mode::kFwd1, Mode::kFwd1Narrow}) {
      if (v.beyond_caches && mode != Mode::kParams && mode != Mode::kDynamic && mode != Mode::kGrad4 && mode != Mode::kGrad2 &&
          mode != Mode::kGrad2Narrow)
        continue;
      std::string name = std::string(v.name) + "/" + modeName(mode);
      benchmark::RegisterBenchmark(name.c_str(), runQuant, v.view, mode)
          ->ArgName("threads")
          ->Arg(1)
          ->Arg(2)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  for (SrNoiseIsa isa : {SrNoiseIsa::kVaes, SrNoiseIsa::kAesNi, SrNoiseIsa::kPortable}) {
    if (!srNoiseIsaSupported(isa)) continue;
    benchmark::RegisterBenchmark((std::string("srnoise/") + srNoiseIsaName(isa)).c_str(), runNoise,
                                 isa)
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
