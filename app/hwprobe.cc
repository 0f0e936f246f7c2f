#include "app/hwprobe.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/convert.h"
#include "kernels/cpu_isa.h"
#include "kernels/gemm.h"
#include "kernels/quantize.h"
#include "runtime/tensor.h"
#include "support/option_ranges.h"

namespace pgq {
namespace {

using Clock = std::chrono::steady_clock;

// The CPU as /proc/cpuinfo names it: "AMD EPYC (family 25, model 1)". Machines of one
// name differ (a Zen 3 and a Zen 5 both say "AMD EPYC"); the family and model tell
// them apart. Empty where /proc/cpuinfo is not there. Quotes and backslashes are dropped
// (the name goes into a quoted YAML string).
std::string cpuName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model_name, family, model;
  auto value = [&](std::string_view key, std::string& into) {
    if (!into.empty() || !line.starts_with(key)) return;
    const size_t colon = line.find(':');
    if (colon == std::string::npos || line.find_first_not_of(" \t", key.size()) != colon) return;
    const size_t start = line.find_first_not_of(' ', colon + 1);
    if (start != std::string::npos) into = line.substr(start);
  };
  while (std::getline(in, line) && (model_name.empty() || family.empty() || model.empty())) {
    value("model name", model_name);
    value("cpu family", family);
    value("model", model);
  }
  std::erase_if(model_name, [](char c) { return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20; });
  if (model_name.empty()) return "";
  return family.empty() || model.empty() ? model_name
                                         : fmt::format("{} (family {}, model {})", model_name, family, model);
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs `body(iterations)` on every thread until `seconds` have passed; returns the
// total work units per second (body returns the units it did).
template <typename Body>
double parallelRate(double seconds, Body body) {
  double total_units = 0;
  auto start = Clock::now();
#pragma omp parallel reduction(+ : total_units)
  {
    double units = 0;
    auto t0 = Clock::now();
    while (secondsSince(t0) < seconds) units += body();
    total_units += units;
  }
  return total_units / secondsSince(start);
}

// 10 independent FMA chains of 8 floats: enough to fill two pipes of 4-cycle latency.
double fmaFlops(double seconds) {
  return parallelRate(seconds, [] {
    __m256 acc[10];
    for (int i = 0; i < 10; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-6f);
    constexpr int kReps = 100000;
    for (int r = 0; r < kReps; ++r)
      for (int i = 0; i < 10; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    float sink = 0;
    for (int i = 0; i < 10; ++i) sink += _mm256_cvtss_f32(acc[i]);
    asm volatile("" : : "x"(sink));
    return 2.0 * 8 * 10 * kReps;
  });
}

// The AVX2 int8 dot product without VNNI: vpmaddubsw (32 u8 x s8 products, pairs summed
// to s16), vpmaddwd with ones (to s32), vpaddd. 64 operations per 32 multiply-adds.
// The empty asm statements make the inputs opaque every iteration, so the compiler
// cannot hoist the loop-invariant products out of the loop.
double int8Ops(double seconds) {
  return parallelRate(seconds, [] {
    // Six independent chains in named registers (arrays would live in memory).
    __m256i a0 = _mm256_set1_epi8(3), a1 = _mm256_set1_epi8(4), a2 = _mm256_set1_epi8(5),
            a3 = _mm256_set1_epi8(6), a4 = _mm256_set1_epi8(7), a5 = _mm256_set1_epi8(8);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
    __m256i b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
    auto step = [&](__m256i acc, __m256i a) {
      return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
    };
    constexpr int kReps = 100000;
    for (int r = 0; r < kReps; ++r) {
      asm volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(b));
      c0 = step(c0, a0);
      c1 = step(c1, a1);
      c2 = step(c2, a2);
      c3 = step(c3, a3);
      c4 = step(c4, a4);
      c5 = step(c5, a5);
    }
    __m256i sum = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
                                   _mm256_add_epi32(c4, c5));
    int sink = _mm256_cvtsi256_si32(sum);
    asm volatile("" : : "r"(sink));
    return 64.0 * 6 * kReps;
  });
}

// STREAM triad a = b + s*c over arrays far larger than the caches; 12 bytes moved per
// element (two reads, one write).
double triadBytes(double seconds) {
  const size_t n = size_t{24} << 20;  // 3 x 96 MiB
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  double best = 0;
  auto start = Clock::now();
  do {
    auto t0 = Clock::now();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + 0.5f * c[i];
    best = std::max(best, 12.0 * static_cast<double>(n) / secondsSince(t0));
  } while (secondsSince(start) < seconds);
  asm volatile("" : : "r"(a.data()) : "memory");
  return best;
}

// The best rate of `run` over repetitions for `seconds`.
template <typename Run>
double bestTime(double seconds, Run run) {
  run();  // primitive creation, first touch
  double best = 1e30;
  auto start = Clock::now();
  do {
    auto t0 = Clock::now();
    run();
    best = std::min(best, secondsSince(t0));
  } while (secondsSince(start) < seconds);
  return best;
}

}  // namespace

HardwareModel probeHardware(const ProbeOptions& o) {
  ranges::kProbeSeconds.check(o.seconds_per_test);
  HardwareModel hw;
  const kernels::Int8Caps& caps = kernels::int8Caps();
  hw.threads = omp_get_max_threads();
  hw.name = fmt::format("probed-{}-{}t", caps.isa_name, hw.threads);
  const std::string cpu = cpuName();
  hw.source = cpu.empty() ? fmt::format("pgq hwprobe, oneDNN ISA {}", caps.isa_name)
                          : fmt::format("pgq hwprobe on {}, oneDNN ISA {}", cpu, caps.isa_name);
  hw.peak_f32 = fmaFlops(o.seconds_per_test) / 1e9;
  hw.peak_int8 = int8Ops(o.seconds_per_test) / 1e9;
  hw.bandwidth_gbs = triadBytes(o.seconds_per_test) / 1e9;

  // What oneDNN achieves on a transformer-sized GEMM, f32 and u8 x s8 in the formats
  // that run exactly here.
  kernels::GemmShape shape{1, 2048, 1024, 1024, false, false};
  auto a = Tensor({DType::kF32, Shape{2048, 1024}}), b = Tensor({DType::kF32, Shape{1024, 1024}}),
       c = Tensor({DType::kF32, Shape{2048, 1024}});
  for (int64_t i = 0; i < a.numElements(); ++i) a.data<float>()[i] = static_cast<float>((i * 7919) % 1000) / 500.0f - 1.0f;
  for (int64_t i = 0; i < b.numElements(); ++i) b.data<float>()[i] = static_cast<float>((i * 104729) % 1000) / 500.0f - 1.0f;
  std::span<const float> as(a.data<float>(), static_cast<size_t>(a.numElements()));
  std::span<const float> bs(b.data<float>(), static_cast<size_t>(b.numElements()));
  std::span<float> cs(c.data<float>(), static_cast<size_t>(c.numElements()));
  double f32_s = bestTime(o.seconds_per_test, [&] { kernels::gemmF32(shape, as, bs, cs); });
  hw.gemm_f32 = shape.flops() / f32_s / 1e9;

  kernels::GemmFormats formats = kernels::defaultGemmFormats(8, kernels::Rounding::kNearest,
                                                             kernels::Rounding::kNearest, kernels::GemmSide::kRhs);
  kernels::OperandView va = kernels::lhsView(shape), vb = kernels::rhsView(shape);
  std::vector<float> pa(static_cast<size_t>(kernels::quantParamCount(va, formats.lhs)));
  std::vector<float> pb(static_cast<size_t>(kernels::quantParamCount(vb, formats.rhs)));
  std::vector<uint8_t> qa(as.size());
  std::vector<int8_t> qb(bs.size());
  kernels::quantizeDynamic(as, va, formats.lhs, pa, qa);
  kernels::quantizeDynamic(bs, vb, formats.rhs, pb, qb);
  double int8_s = bestTime(o.seconds_per_test, [&] { kernels::int8Gemm(shape, qa, formats.lhs, pa, qb, formats.rhs, pb, cs); });
  hw.gemm_int8 = shape.flops() / int8_s / 1e9;

  // bf16: oneDNN's native GEMM where the CPU has bf16 dot products (AVX512-BF16, AMX);
  // elsewhere bf16 GEMMs are f32 GEMMs of the widened values (kernels/convert.h).
  hw.gemm_bf16 = hw.gemm_f32;
  if (kernels::hasBf16Gemm()) {
    std::vector<uint16_t> a16(as.size()), b16(bs.size());
    kernels::f32ToBf16(as.data(), a16.data(), static_cast<int64_t>(as.size()));
    kernels::f32ToBf16(bs.data(), b16.data(), static_cast<int64_t>(bs.size()));
    double bf16_s = bestTime(o.seconds_per_test, [&] { kernels::gemmBf16(shape, a16, b16, cs); });
    hw.gemm_bf16 = shape.flops() / bf16_s / 1e9;
    hw.formats.push_back(FormatFamily::kBf16);  // a third choice for recipes, beside int8 and f32
  }
  // The achieved rates are measured; keep the peaks at least as high as them (on a
  // busy machine the short FMA loop can come out below what oneDNN achieved). bf16's
  // peak is not probed: at least f32's, and at least what its GEMM achieved.
  hw.peak_f32 = std::max(hw.peak_f32, hw.gemm_f32);
  hw.peak_int8 = std::max(hw.peak_int8, hw.gemm_int8);
  hw.peak_bf16 = std::max(hw.peak_f32, hw.gemm_bf16);

  // Dynamic quantization of an activation, bytes in + out.
  kernels::QuantFormat sr = formats.lhs;
  sr.rounding = kernels::Rounding::kStochastic;
  double rtn_s = bestTime(o.seconds_per_test, [&] { kernels::quantizeDynamic(as, va, formats.lhs, pa, qa); });
  double sr_s = bestTime(o.seconds_per_test, [&] { kernels::quantizeDynamic(as, va, sr, pa, qa, {1, 2}); });
  hw.quantize_rtn_gbs = 5.0 * static_cast<double>(as.size()) / rtn_s / 1e9;
  hw.quantize_sr_gbs = 5.0 * static_cast<double>(as.size()) / sr_s / 1e9;

  // The fixed cost of a small call.
  kernels::GemmShape tiny{1, 8, 8, 8, false, false};
  double tiny_s = bestTime(o.seconds_per_test / 3, [&] { kernels::gemmF32(tiny, as.first(64), bs.first(64), cs.first(64)); });
  hw.call_overhead_us = tiny_s * 1e6;

  hw.vnni = caps.vnni;
  hw.max_bits_one = caps.max_bits_one;
  hw.max_bits_both = caps.max_bits_both;
  return hw;
}

}  // namespace pgq
