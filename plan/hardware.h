#pragma once
// The hardware model stage (ii) reasons with (YAML, edited by users or written by
// `pgq hwprobe`), and the roofline estimate of a GEMM in high precision vs int8.
//
// A GEMM's time is estimated as the larger of its compute time (flops at the achieved
// GEMM rate) and its memory time (operand and result bytes at the memory bandwidth),
// plus a fixed cost per kernel call. The int8 version adds the quantization traffic
// done every step: scales and quantization of both f32 operands (bytes in + out at the
// quantizer's rate; stochastic rounding is slower) and the rescale of the result.
//
// A GPU model adds how a GEMM's time depends on its shape (GemmShapeModel, fitted to
// measured times: docs/FORMATS.md, "The GPU GEMM model") and runs attention as one
// flash-attention kernel each way (FlashAttentionModel) instead of six batched GEMMs.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/gemm_meta.h"
#include "support/quant_format.h"
#include "support/quant_scheme.h"

namespace pgq {

// How a GPU GEMM's time depends on its shape. Output tiles of tile x tile spread over the
// SMs; few tiles spread their K loop over more SMs (split-K or stream-K), up to what the
// library does; each wave of tiles pays a fixed cost a short K does not hide (the
// pipeline's fill and the epilogue's writes), each GEMM a launch. Absent (sms == 0): the
// plain roofline, as on CPUs.
struct GemmShapeModel {
  struct Format {
    int64_t max_split_k = 1;  // K splits of one output tile at most
    int64_t split_k_sms = 0;  // SMs split-K fills at most
    double tile_us = 0;       // per wave of output tiles
    double launch_us = 0;     // per GEMM
  };
  int64_t sms = 0;
  int64_t tile = 128;
  Format bf16;  // every GEMM with 2- or 4-byte operands
  Format fp8;   // every GEMM with 1-byte operands (FP8, int8, MX: the same tensor cores)
};

// Causal attention as one flash-attention kernel forward and one backward (FlashAttention
// 2, as PyTorch's SDPA runs it): blocks of tile x tile scores on or below the diagonal at
// a fraction of the bf16 peak, plus the kernel's own traffic (forward: q, k, v read and o
// written; backward: 16 tensor passes with the fp32 dq accumulator).
struct FlashAttentionModel {
  bool fused = false;
  double fwd_efficiency = 0, bwd_efficiency = 0;  // of peak_bf16
};

// One measured GEMM of a probe (pgq gpuprobe): [batch, M, K, N] and its times, us
// (fp8_us 0: not measured, as for batched GEMMs).
struct MeasuredGemm {
  std::array<int64_t, 4> shape{};
  double bf16_us = 0, fp8_us = 0;
};

// The largest K whose int32 sums pgq's CPU int8 GEMM (u8 x s8) keeps exact: 255 * 128 * K
// < 2^31. kernels::kMaxInt8GemmK is the kernel's own bound (plan/ does not include
// kernels/; runtime/cpu_backend.cc asserts the two equal).
inline constexpr int64_t kCpuInt8MaxK = 65793;

struct HardwareModel {
  std::string name;
  std::string source;  // where the numbers come from
  int64_t threads = 1;
  // Peak arithmetic rates and what GEMMs achieve, GFLOP/s (int8: GOP/s).
  double peak_f32 = 0, peak_bf16 = 0, peak_int8 = 0;
  double gemm_f32 = 0, gemm_bf16 = 0, gemm_int8 = 0;
  // FP8 and MXFP8 GEMM rates (0: the hardware has none). MXFP8 defaults to the FP8 rate.
  double peak_fp8 = 0, gemm_fp8 = 0, peak_mxfp8 = 0, gemm_mxfp8 = 0;
  // FP4 GEMM rates (NVFP4 and MXFP4 run on the same FP4 tensor cores; 0: none, as on
  // Hopper and CDNA3).
  double peak_fp4 = 0, gemm_fp4 = 0;
  // The dtype GEMMs run in when not quantized: f32 (CPUs) or bf16 (GPU training).
  DType high_precision = DType::kF32;
  // The format families (support/quant_scheme.h) this hardware runs natively; a recipe
  // for it may use only these.
  std::vector<FormatFamily> formats = {FormatFamily::kInt8};
  // The training library casts each tensor once per step and every GEMM reading it
  // reuses that copy (Transformer Engine's cast-transpose: a forward activation's FP8
  // copy also serves its weight gradient, dY's both of its GEMMs). False: each GEMM
  // quantizes its own operands (pgq's int8 path on CPUs).
  bool cast_once = false;
  double bandwidth_gbs = 0;
  double quantize_rtn_gbs = 0;  // scales + quantize, bytes in + out per second
  double quantize_sr_gbs = 0;
  double call_overhead_us = 0;
  // Optional: the link between the devices of a tensor-parallel group, per device
  // (GB/s each way) and per message hop (us), costing collectives. 0: not modelled.
  double interconnect_gbs = 0;
  double interconnect_latency_us = 0;
  // int8 operand formats that run exactly (without VNNI one side is 7-bit: kernels/cpu_isa.h).
  bool vnni = false;
  int max_bits_one = 8;
  int max_bits_both = 7;
  GemmShapeModel gemm_model;
  FlashAttentionModel attention;
  std::vector<MeasuredGemm> measured_gemms;  // what gemm_model was fitted to, if given

  // True when an int8 GEMM of an lhs_bits x rhs_bits operand pair cannot saturate here.
  bool runsExactly(int lhs_bits, int rhs_bits) const;
  // The exact pairs in words: "no VNNI: exact up to 8 x 7 bits".
  std::string int8Limits() const;
  bool runsFamily(FormatFamily family) const;
  // The achieved GEMM rate of a quantized GEMM in `format` (by family), GFLOP/s.
  double gemmRate(const QuantFormat& format) const;
  double ridge(DType dtype) const;  // flop per byte at the peak rate
  double peak(DType dtype) const;
  double gemmRate(DType dtype) const;
};

// `spec` is a preset name (recipes/hardware/*.yaml, embedded) or a YAML file. Every
// field is checked: missing peaks, zero or negative rates, ridge points that do not
// match peak / bandwidth, unknown keys, measured times that are not positive numbers, a
// gemm_model that does not predict its own measured_gemms (median error above 25%) are
// errors naming the file, line and field.
HardwareModel loadHardwareModel(const std::string& spec);
HardwareModel parseHardwareModel(const std::string& yaml_text, const std::string& source);
std::string hardwareToYaml(const HardwareModel& hw);
std::vector<std::string> hardwarePresetNames();

struct GemmEstimate {
  double high_precision_us = 0;  // the GEMM in its current dtype
  double int8_gemm_us = 0;       // the int8 GEMM alone
  double quantization_us = 0;    // scales + quantize of both operands + rescale
  double int8Us() const { return int8_gemm_us + quantization_us; }
  double speedup() const { return high_precision_us / int8Us(); }
};

// A ring collective over `devices` devices on the interconnect: all_reduce of `bytes`
// (each device sends 2 (T-1)/T of them), all_gather / reduce_scatter of a `bytes`
// whole value ((T-1)/T), with one latency per ring step. Microseconds; 0 without an
// interconnect in the model or on one device.
enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter };
double estimateCollectiveUs(const HardwareModel& hw, CollectiveKind kind, double bytes, int64_t devices);

// `shape` is [batch, M, K, N] (per device); `dtype` the high-precision operand dtype;
// `lhs_sr` / `rhs_sr` whether that operand is quantized with stochastic rounding.
GemmEstimate estimateGemm(const HardwareModel& hw, const std::vector<int64_t>& shape, DType dtype, bool lhs_sr,
                          bool rhs_sr);
// The same for a GEMM quantized to `lhs` x `rhs` (any family this hardware runs): the
// quantized GEMM at the family's rate with one byte per element (plus one scale byte
// per block for MX), and quantization traffic reading `dtype` and writing one byte;
// FP8/MX scales are applied in the GEMM's epilogue (no separate rescale pass).
// `lhs_share` / `rhs_share`: the part of each operand's cast this GEMM pays (1 / the
// GEMMs that share the cast when hw.cast_once; 1 otherwise).
GemmEstimate estimateGemm(const HardwareModel& hw, const std::vector<int64_t>& shape, DType dtype,
                          const QuantFormat& lhs, const QuantFormat& rhs, double lhs_share = 1.0,
                          double rhs_share = 1.0);

// A GEMM [batch, M, K, N] on a GPU as the recipe generator estimates it: in bf16, in FP8
// (E4M3 per-tensor operands already cast: the GEMM alone) and the cast of each operand
// (a: M x K, b: K x N) from bf16. `extrapolation`: how far the shape lies outside the
// measured GEMMs' range, the largest ratio of a dimension (batch, M, K or N) to the
// nearest measured bound (1: inside it; 0: the model has no measured GEMMs).
struct GpuGemmEstimate {
  double bf16_us = 0, fp8_us = 0, a_cast_us = 0, b_cast_us = 0;
  double extrapolation = 0;
};
GpuGemmEstimate estimateGpuGemm(const HardwareModel& hw, const std::array<int64_t, 4>& shape);
double extrapolationOf(const HardwareModel& hw, const std::array<int64_t, 4>& shape);

// Causal flash attention over `heads` (batch x heads) sequences of `t` x `dh` in bf16, one
// kernel forward or backward, us. Needs hw.attention.fused.
double estimateFlashAttentionUs(const HardwareModel& hw, int64_t heads, int64_t t, int64_t dh, bool backward);
// Attention's batched GEMMs (batch > 1, no weight operand: q.k^T, p.v and their four
// gradients, whose dims are T, T and the head dim in some order) on hardware that runs
// attention fused: this GEMM's share of the flash kernel (the forward split over the two
// forward GEMMs, the backward over the four gradient GEMMs). nullopt for any other GEMM
// or hardware.
std::optional<double> fusedAttentionUs(const HardwareModel& hw, const std::vector<int64_t>& shape,
                                       GemmDirection direction, const OperandRoles& roles);

}  // namespace pgq
