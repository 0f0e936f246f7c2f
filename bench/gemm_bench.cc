// f32 vs int8 GEMMs on the shapes of the `small` transformer (tokens M = 2048 = batch 16
// x seq 128, d_model 256, d_ff 1024, vocab 256), two linears of GPT-2 124M at 256 tokens
// (`gpt2_124m.*`) and four reference shapes (`hw.*`), at 1
// and 2 threads (the benchmark argument):
//   f32        gemmF32
//   int8_raw   int8Gemm on operands quantized beforehand (GEMM + zero point + rescale)
//   int8_quant quantizeDynamic (scales + quantize) of both operands every call, then
//              int8Gemm: what a quantized GEMM costs in training, where both operands
//              change every step
// Formats: the exact pair on this CPU (defaultGemmFormats: lhs int8:channel:rtn, rhs
// int7:channel:rtn without VNNI). Each forward GEMM Y[M,N] = X[M,K] W[K,N] comes with its
// input-gradient GEMM dX = dY W^T ([M,N] x [N,K], W stored [K,N] read transposed) and
// its weight-gradient GEMM dW = X^T dY ([K,M] x [M,N], X stored [M,K] read transposed).
// Times are wall-clock (UseRealTime): the work runs on OpenMP threads. After the usual
// output a summary table gives GFLOP/s and the int8/f32 speedups.
//
//   build-quant/bench/gemm_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/threads.h"
#include "kernels/convert.h"
#include "kernels/gemm.h"
#include "kernels/quantize.h"

namespace pgq::kernels {
namespace {

struct NamedShape {
  std::string name;
  GemmShape shape;
};

// Forward, dgrad and wgrad shapes of a linear layer with input [M,K] and weight [K,N].
void addLinear(std::vector<NamedShape>& shapes, const std::string& name, int64_t m, int64_t k,
               int64_t n) {
  shapes.push_back({name + "/fwd", GemmShape{1, m, n, k, false, false}});   // [M,K] x [K,N]
  shapes.push_back({name + "/dgrad", GemmShape{1, m, k, n, false, true}});  // [M,N] x [N,K]
  shapes.push_back({name + "/wgrad", GemmShape{1, k, n, m, true, false}});  // [K,M] x [M,N]
}

std::vector<NamedShape> benchShapes() {
  std::vector<NamedShape> shapes;
  // q/k/v/o projections and the logits (vocab 256) share one shape.
  addLinear(shapes, "small.qkvo+logits", 2048, 256, 256);
  addLinear(shapes, "small.up", 2048, 256, 1024);
  addLinear(shapes, "small.down", 2048, 1024, 256);
  // GPT-2 124M at bench/gpt2_124m_exact.yaml's 256 tokens per step: its weight gradients
  // contract over 256 tokens with a transposed A (on AMX the int8 GEMM copies A row-major
  // first, int8_gemm.cc rowMajorA).
  addLinear(shapes, "gpt2_124m.fc", 256, 768, 3072);
  addLinear(shapes, "gpt2_124m.logits", 256, 768, 50257);
  for (auto [m, k, n] : {std::tuple{512, 256, 256}, std::tuple{2048, 512, 2048},
                         std::tuple{4096, 1024, 1024}, std::tuple{256, 2048, 256}}) {
    shapes.push_back({fmt::format("hw.{}x{}x{}", m, k, n), GemmShape{1, m, n, k}});
  }
  return shapes;
}

std::vector<float> randomData(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// bf16: the native bf16 GEMM (operands already bf16, f32 accumulation), registered on
// CPUs with bf16 dot products only (cpu_isa.h, hasBf16Gemm).
enum class Mode { kF32, kBf16, kInt8Raw, kInt8Quant };
const char* modeName(Mode mode) {
  switch (mode) {
    case Mode::kF32: return "f32";
    case Mode::kBf16: return "bf16";
    case Mode::kInt8Raw: return "int8_raw";
    case Mode::kInt8Quant: return "int8_quant";
  }
  return "?";
}

void runGemm(benchmark::State& state, GemmShape shape, Mode mode) {
  omp_set_num_threads(int(state.range(0)));
  const std::vector<float> a = randomData(shape.sizeA(), 1);
  const std::vector<float> b = randomData(shape.sizeB(), 2);
  std::vector<float> c(shape.sizeC());
  const GemmFormats f =
      defaultGemmFormats(8, Rounding::kNearest, Rounding::kNearest, GemmSide::kRhs);
  const OperandView va = lhsView(shape), vb = rhsView(shape);
  std::vector<float> pa(quantParamCount(va, f.lhs)), pb(quantParamCount(vb, f.rhs));
  std::vector<uint8_t> qa(a.size());
  std::vector<int8_t> qb(b.size());
  auto quantizeBoth = [&] {
    quantizeDynamic(a, va, f.lhs, pa, qa);
    quantizeDynamic(b, vb, f.rhs, pb, qb);
  };
  quantizeBoth();
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  f32ToBf16(a.data(), a16.data(), static_cast<int64_t>(a.size()));
  f32ToBf16(b.data(), b16.data(), static_cast<int64_t>(b.size()));
  for (auto _ : state) {
    switch (mode) {
      case Mode::kF32: gemmF32(shape, a, b, c); break;
      case Mode::kBf16: gemmBf16(shape, a16, b16, c); break;
      case Mode::kInt8Raw: int8Gemm(shape, qa, f.lhs, pa, qb, f.rhs, pb, c); break;
      case Mode::kInt8Quant:
        quantizeBoth();
        int8Gemm(shape, qa, f.lhs, pa, qb, f.rhs, pb, c);
        break;
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(shape.flops() / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Prints the usual console output, then a table of GFLOP/s and int8/f32 speedups.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration && run.aggregate_name != "median") continue;
      // Names are "<shape>/<mode>/threads:<t>/real_time[_median]"; shapes contain "/".
      std::string name = run.benchmark_name();
      std::vector<std::string> parts;
      for (size_t start = 0, end; start <= name.size(); start = end + 1) {
        end = name.find('/', start);
        if (end == std::string::npos) end = name.size();
        parts.push_back(name.substr(start, end - start));
      }
      auto threads = std::find_if(parts.begin(), parts.end(),
                                  [](const std::string& p) { return p.rfind("threads:", 0) == 0; });
      if (threads == parts.end() || threads - parts.begin() < 2) continue;
      std::string shape;
      for (auto p = parts.begin(); p != threads - 1; ++p) shape += (shape.empty() ? "" : "/") + *p;
      std::string key = shape + " " + *threads;
      const std::string& mode = *(threads - 1);
      auto it = run.counters.find("GFLOP/s");
      if (it != run.counters.end()) gflops_[key][mode] = it->second.value;
      if (std::find(order_.begin(), order_.end(), key) == order_.end()) order_.push_back(key);
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n%-34s %8s %8s %9s %9s %9s %10s %10s\n", "shape threads", "f32", "bf16", "int8_raw", "int8_quant",
                "bf16/f32", "raw/f32", "quant/f32");
    for (const std::string& key : order_) {
      auto& g = gflops_[key];
      double f32 = g["f32"], bf16 = g["bf16"], raw = g["int8_raw"], quant = g["int8_quant"];
      std::printf("%-34s %8.1f %8.1f %9.1f %9.1f %8.2fx %9.2fx %9.2fx\n", key.c_str(), f32, bf16, raw, quant,
                  f32 > 0 ? bf16 / f32 : 0.0, f32 > 0 ? raw / f32 : 0.0, f32 > 0 ? quant / f32 : 0.0);
    }
  }

 private:
  std::map<std::string, std::map<std::string, double>> gflops_;
  std::vector<std::string> order_;
};

}  // namespace
}  // namespace pgq::kernels

int main(int argc, char** argv) {
  pgq::kernels::useSpinWaitPolicy(argv);  // as pgq runs (kernels/threads.h)
  using namespace pgq::kernels;
  for (const NamedShape& s : benchShapes()) {
    for (Mode mode : {Mode::kF32, Mode::kBf16, Mode::kInt8Raw, Mode::kInt8Quant}) {
      if (mode == Mode::kBf16 && !hasBf16Gemm()) continue;
      std::string name = s.name + "/" + modeName(mode);
      benchmark::RegisterBenchmark(name.c_str(), runGemm, s.shape, mode)
          ->ArgName("threads")
          ->Arg(1)
          ->Arg(2)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
