#pragma once
// What the CPU's int8 GEMM can do exactly. Without VNNI, oneDNN's AVX2 int8 GEMM uses
// vpmaddubsw, which adds two u8 x s8 products into a saturating 16-bit lane: with
// full-range operands (u8 0..255 times s8 -128..127) results are silently wrong
// (tests/kernels/int8_gemm_test.cc, FullEightBitTrapOnThisCpu). The sum of two products stays in range when the u8 side is in
// [0, 127] or the s8 side in [-64, 63], i.e. when one operand has at most 7 bits. With
// VNNI (vpdpbusd accumulates into 32 bits) or AMX, full 8 x 8 bits are exact.
#include <string>

namespace pgq::kernels {

struct Int8Caps {
  bool vnni = false;
  // oneDNN's name for the ISA it dispatches to, e.g. "avx2", "avx512_core_vnni".
  std::string isa_name;
  // The exact bit pairs: each operand may have up to max_bits_one bits, and the narrower
  // of the two at most max_bits_both (8/8 with VNNI; 8/7 without).
  int max_bits_one = 8;
  int max_bits_both = 7;

  // True when an lhs_bits x rhs_bits GEMM cannot saturate on this CPU.
  bool exact(int lhs_bits, int rhs_bits) const;
  std::string describe() const;
};

// Detected once, on first use, from dnnl::get_effective_cpu_isa().
const Int8Caps& int8Caps();
// Whether the CPU has bf16 dot products (AVX512-BF16 or AMX), with which oneDNN runs a
// bf16 GEMM natively (gemm.h, gemmBf16); without them bf16 GEMMs are f32 GEMMs of the
// widened values (kernels/convert.h). Detected once, like int8Caps().
bool hasBf16Gemm();
// Whether pgq's own kernels run their 512-bit paths: on when the CPU has AVX-512 F, BW
// and VL (Zen 4 and 5, Intel Xeon since Skylake-SP), detected once. Where a kernel has
// such a path it stores the same results as its 256-bit one (tests compare the two).
bool avx512Kernels();
// Turns the 512-bit paths off (false) or back on (true, only where the CPU has them), so
// that tests and benchmarks can run both in one process. Not for use while kernels run.
void setAvx512Kernels(bool on);
// The capabilities of a CPU with or without VNNI (for tests and hardware models).
Int8Caps int8CapsFor(bool vnni, std::string isa_name);

// The oneDNN library pgq runs with, "2.6.3" (for `pgq --version`).
std::string onednnVersion();

}  // namespace pgq::kernels
