#include "kernels/cpu_isa.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <oneapi/dnnl/dnnl.hpp>

namespace pgq::kernels {
namespace {

const char* isaName(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::all: return "all";
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
  }
  return "unknown";
}

// Every ISA at or above one of these has an int8 dot product that accumulates into 32
// bits. Compared by enumerator, never by raw value: the numeric order of
// dnnl::cpu_isa is not an order of capability.
bool hasVnni(dnnl::cpu_isa isa) {
  return isa == dnnl::cpu_isa::avx2_vnni || isa == dnnl::cpu_isa::avx512_core_vnni ||
         isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

}  // namespace

bool Int8Caps::exact(int lhs_bits, int rhs_bits) const {
  return std::max(lhs_bits, rhs_bits) <= max_bits_one &&
         std::min(lhs_bits, rhs_bits) <= max_bits_both;
}

std::string Int8Caps::describe() const {
  return fmt::format("{} ({}; exact int8 GEMM up to {} x {} bits)", isa_name,
                     vnni ? "VNNI" : "no VNNI", max_bits_one, max_bits_both);
}

Int8Caps int8CapsFor(bool vnni, std::string isa_name) {
  Int8Caps caps;
  caps.vnni = vnni;
  caps.isa_name = std::move(isa_name);
  caps.max_bits_one = 8;
  caps.max_bits_both = vnni ? 8 : 7;
  return caps;
}

const Int8Caps& int8Caps() {
  static const Int8Caps caps = [] {
    dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return int8CapsFor(hasVnni(isa), isaName(isa));
  }();
  return caps;
}

bool hasBf16Gemm() {
  static const bool native = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  }();
  return native;
}

namespace {
bool cpuHasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}
// Read by every quantize call: detected once (a per-call CPUID once made quantize 8x
// slower, docs/PERFORMANCE.md), then only this flag.
std::atomic<bool> g_avx512_kernels{cpuHasAvx512()};
}  // namespace

bool avx512Kernels() { return g_avx512_kernels.load(std::memory_order_relaxed); }

void setAvx512Kernels(bool on) { g_avx512_kernels.store(on && cpuHasAvx512(), std::memory_order_relaxed); }

std::string onednnVersion() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

}  // namespace pgq::kernels
