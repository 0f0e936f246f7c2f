// Validates the roofline estimator (plan/hardware.h) against measured times: for
// every GEMM shape of the `small` model (forward, dgrad, wgrad), the f32 GEMM and the
// int8 GEMM with dynamic quantization of both operands and the rescale, as the
// quantize_gemms rewrite runs them. The hardware model is probed on this machine first
// (pgq hwprobe), so the error is that of the model, not of the preset's numbers.
//
//   build/bench/roofline_bench [--threads N]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/threads.h"
#include "app/hwprobe.h"
#include "kernels/gemm.h"
#include "kernels/quantize.h"
#include "plan/hardware.h"
#include "runtime/tensor.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename Run>
double medianUs(Run run) {
  run();
  std::vector<double> t;
  for (int i = 0; i < 15; ++i) {
    auto t0 = Clock::now();
    run();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Case {
  std::string name;
  pgq::kernels::GemmShape shape;
  bool lhs_sr, rhs_sr;
};

}  // namespace

int main(int argc, char** argv) {
  pgq::kernels::useSpinWaitPolicy(argv);  // as pgq runs (kernels/threads.h)
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--threads") == 0) omp_set_num_threads(std::atoi(argv[i + 1]));
  namespace k = pgq::kernels;
  pgq::HardwareModel hw = pgq::probeHardware();
  std::vector<Case> cases;
  auto linear = [&](const std::string& name, int64_t m, int64_t kk, int64_t n) {
    cases.push_back({name + " fwd", {1, m, n, kk, false, false}, false, false});
    cases.push_back({name + " dgrad", {1, m, kk, n, false, true}, true, false});
    cases.push_back({name + " wgrad", {1, kk, n, m, true, false}, false, true});
  };
  linear("qkvo", 2048, 256, 256);
  linear("up", 2048, 256, 1024);
  linear("down", 2048, 1024, 256);
  cases.push_back({"scores fwd", {64, 128, 128, 64, false, true}, false, false});
  cases.push_back({"tiny fwd", {1, 64, 32, 32, false, false}, false, false});

  std::printf("Roofline estimate vs measured (%d threads; hardware probed: f32 GEMM %.0f, int8 GEMM %.0f GFLOP/s, "
              "%.0f GB/s, quantize %.0f/%.0f GB/s RTN/SR)\n\n",
              omp_get_max_threads(), hw.gemm_f32, hw.gemm_int8, hw.bandwidth_gbs, hw.quantize_rtn_gbs,
              hw.quantize_sr_gbs);
  std::printf("| GEMM | batch,M,K,N | f32 est us | f32 meas us | err | int8+quant est us | int8+quant meas us | err | "
              "speedup est | speedup meas |\n|---|---|---|---|---|---|---|---|---|---|\n");
  double abs_err = 0;
  int n_err = 0;
  for (const Case& c : cases) {
    const k::GemmShape& s = c.shape;
    pgq::Tensor a({pgq::DType::kF32, pgq::Shape{s.sizeA()}}), b({pgq::DType::kF32, pgq::Shape{s.sizeB()}}),
        out({pgq::DType::kF32, pgq::Shape{s.sizeC()}});
    for (int64_t i = 0; i < a.numElements(); ++i) a.data<float>()[i] = std::sin(0.37f * static_cast<float>(i));
    for (int64_t i = 0; i < b.numElements(); ++i) b.data<float>()[i] = std::cos(0.11f * static_cast<float>(i));
    std::span<const float> as(a.data<float>(), static_cast<size_t>(s.sizeA()));
    std::span<const float> bs(b.data<float>(), static_cast<size_t>(s.sizeB()));
    std::span<float> cs(out.data<float>(), static_cast<size_t>(s.sizeC()));
    double f32_us = medianUs([&] { k::gemmF32(s, as, bs, cs); });
    k::GemmFormats f = k::defaultGemmFormats(8, c.lhs_sr ? k::Rounding::kStochastic : k::Rounding::kNearest,
                                             c.rhs_sr ? k::Rounding::kStochastic : k::Rounding::kNearest,
                                             k::GemmSide::kRhs);
    k::OperandView va = k::lhsView(s), vb = k::rhsView(s);
    std::vector<float> pa(static_cast<size_t>(k::quantParamCount(va, f.lhs))), pb(static_cast<size_t>(k::quantParamCount(vb, f.rhs)));
    std::vector<uint8_t> qa(as.size());
    std::vector<int8_t> qb(bs.size());
    uint64_t step = 0;
    double int8_us = medianUs([&] {
      k::computeQuantParams(as, va, f.lhs, pa);
      k::quantize(as, va, f.lhs, pa, qa, {1, step});
      k::computeQuantParams(bs, vb, f.rhs, pb);
      k::quantize(bs, vb, f.rhs, pb, qb, {2, step++});
      k::int8Gemm(s, qa, f.lhs, pa, qb, f.rhs, pb, cs);
    });
    pgq::GemmEstimate e = pgq::estimateGemm(hw, {s.batch, s.m, s.k, s.n}, pgq::DType::kF32, c.lhs_sr, c.rhs_sr);
    double err_f32 = (e.high_precision_us - f32_us) / f32_us, err_int8 = (e.int8Us() - int8_us) / int8_us;
    abs_err += std::abs(err_f32) + std::abs(err_int8);
    n_err += 2;
    std::printf("| %s | %lld,%lld,%lld,%lld | %.0f | %.0f | %+.0f%% | %.0f | %.0f | %+.0f%% | %.2fx | %.2fx |\n",
                c.name.c_str(), static_cast<long long>(s.batch), static_cast<long long>(s.m),
                static_cast<long long>(s.k), static_cast<long long>(s.n), e.high_precision_us, f32_us, 100 * err_f32,
                e.int8Us(), int8_us, 100 * err_int8, e.speedup(), f32_us / int8_us);
  }
  std::printf("\nmean absolute error of the time estimates: %.0f%%\n", 100 * abs_err / n_err);
  return 0;
}
