#include "plan/hardware.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/config_file.h"
#include "support/errors.h"
#include "pgq_hardware_presets.h"

namespace pgq {

double HardwareModel::peak(DType dtype) const {
  return dtype == DType::kBF16 ? peak_bf16 : isFloat(dtype) ? peak_f32 : peak_int8;
}

double HardwareModel::gemmRate(DType dtype) const {
  return dtype == DType::kBF16 ? gemm_bf16 : isFloat(dtype) ? gemm_f32 : gemm_int8;
}

double HardwareModel::ridge(DType dtype) const { return peak(dtype) / bandwidth_gbs; }

bool HardwareModel::runsExactly(int lhs_bits, int rhs_bits) const {
  return std::max(lhs_bits, rhs_bits) <= max_bits_one && std::min(lhs_bits, rhs_bits) <= max_bits_both;
}

bool HardwareModel::runsFamily(FormatFamily family) const {
  return std::find(formats.begin(), formats.end(), family) != formats.end();
}

namespace {

// FP8 tensor cores run these families' GEMMs (MXFP8 at its own rate where given).
bool runsOnFp8Cores(FormatFamily family) {
  switch (family) {
    case FormatFamily::kFp8:
    case FormatFamily::kMxfp8:
    case FormatFamily::kMossFp8: return true;
    case FormatFamily::kInt8:
    case FormatFamily::kMxint8: return false;
  }
  return false;
}

}  // namespace

double HardwareModel::gemmRate(const QuantFormat& format) const {
  const FormatFamily family = formatFamily(format);
  if (family == FormatFamily::kMxfp8) return gemm_mxfp8 > 0 ? gemm_mxfp8 : gemm_fp8;
  return runsOnFp8Cores(family) ? gemm_fp8 : gemm_int8;
}

std::string HardwareModel::int8Limits() const {
  return fmt::format("{}: exact up to {} x {} bits", vnni ? "VNNI" : "no VNNI", max_bits_one, max_bits_both);
}

namespace {

constexpr double kMaxRate = 1e9;  // GFLOP/s or GB/s: anything above is a typo

double rate(const ConfigNode& map, std::string_view key) {
  return map.getDouble(key, 1e-6, kMaxRate);
}

HardwareModel fromNode(const ConfigNode& root) {
  root.allowOnly({"name", "source", "threads", "peak_gflops", "gemm_gflops", "memory_bandwidth_gbs",
                  "ridge_flop_per_byte", "quantize_gbs", "call_overhead_us", "int8", "interconnect", "formats",
                  "high_precision", "cast_once"});
  HardwareModel hw;
  hw.name = root.getString("name");
  hw.source = root.getString("source", "");
  hw.threads = root.getInt("threads", 1, 1 << 20);
  ConfigNode peak = root.child("peak_gflops");
  peak.allowOnly({"f32", "bf16", "int8", "fp8", "mxfp8"});
  hw.peak_f32 = rate(peak, "f32");
  hw.peak_bf16 = rate(peak, "bf16");
  hw.peak_int8 = rate(peak, "int8");
  hw.peak_fp8 = peak.getDouble("fp8", 0.0, 0.0, kMaxRate);
  hw.peak_mxfp8 = peak.getDouble("mxfp8", 0.0, 0.0, kMaxRate);
  ConfigNode gemm = root.child("gemm_gflops");
  gemm.allowOnly({"f32", "bf16", "int8", "fp8", "mxfp8"});
  hw.gemm_f32 = rate(gemm, "f32");
  hw.gemm_bf16 = rate(gemm, "bf16");
  hw.gemm_int8 = rate(gemm, "int8");
  hw.gemm_fp8 = gemm.getDouble("fp8", 0.0, 0.0, kMaxRate);
  hw.gemm_mxfp8 = gemm.getDouble("mxfp8", 0.0, 0.0, kMaxRate);
  if (hw.gemm_f32 > hw.peak_f32 * 1.05 || hw.gemm_bf16 > hw.peak_bf16 * 1.05 || hw.gemm_int8 > hw.peak_int8 * 1.05 ||
      hw.gemm_fp8 > hw.peak_fp8 * 1.05 || hw.gemm_mxfp8 > std::max(hw.peak_mxfp8, hw.peak_fp8) * 1.05)
    root.fail("gemm_gflops", "achieved GEMM rates cannot exceed the peak rates");
  if ((hw.peak_fp8 > 0) != (hw.gemm_fp8 > 0))
    root.fail(hw.peak_fp8 > 0 ? "gemm_gflops" : "peak_gflops", "fp8 needs both a peak and an achieved GEMM rate");
  if (root.has("formats")) {
    hw.formats.clear();
    for (const ConfigNode& item : root.child("formats").items()) {
      std::string name = item.asString();
      std::optional<FormatFamily> family = parseFormatFamily(name);
      if (!family)
        item.failHere(
            fmt::format("unknown format family '{}' (expected one of {})", name, fmt::join(kFormatFamilies, ", ")));
      if (hw.runsFamily(*family)) root.fail("formats", fmt::format("'{}' is listed twice", name));
      if (runsOnFp8Cores(*family) && hw.gemm_fp8 <= 0)
        root.fail("formats", fmt::format("lists '{}' but peak_gflops / gemm_gflops give no fp8 rate", name));
      hw.formats.push_back(*family);
    }
    if (hw.formats.empty())
      root.fail("formats", fmt::format("lists no format family ({})", fmt::join(kFormatFamilies, ", ")));
  } else if (hw.gemm_fp8 > 0) {
    hw.formats = {FormatFamily::kInt8, FormatFamily::kFp8};
  }
  hw.cast_once = root.getBool("cast_once", false);
  hw.high_precision = root.getEnum("high_precision", {"f32", "bf16"}, "f32") == "bf16" ? DType::kBF16 : DType::kF32;
  hw.bandwidth_gbs = root.getDouble("memory_bandwidth_gbs", 1e-6, kMaxRate);
  if (root.has("ridge_flop_per_byte")) {
    ConfigNode ridge = root.child("ridge_flop_per_byte");
    ridge.allowOnly({"f32", "bf16", "int8", "fp8"});
    if (ridge.has("fp8")) {
      double given = ridge.getDouble("fp8", 1e-9, kMaxRate), derived = hw.peak_fp8 / hw.bandwidth_gbs;
      if (std::abs(given - derived) > 0.05 * derived)
        ridge.fail("fp8", fmt::format("{} flop/byte does not match peak / bandwidth = {:.3g}", given, derived));
    }
    for (auto [key, dtype] : {std::pair{"f32", DType::kF32}, {"bf16", DType::kBF16}, {"int8", DType::kS8}}) {
      if (!ridge.has(key)) continue;
      double given = ridge.getDouble(key, 1e-9, kMaxRate);
      double derived = hw.ridge(dtype);
      if (std::abs(given - derived) > 0.05 * derived)
        ridge.fail(key, fmt::format("{} flop/byte does not match peak / bandwidth = {:.3g}", given, derived));
    }
  }
  ConfigNode quant = root.child("quantize_gbs");
  quant.allowOnly({"rtn", "sr"});
  hw.quantize_rtn_gbs = rate(quant, "rtn");
  hw.quantize_sr_gbs = rate(quant, "sr");
  hw.call_overhead_us = root.getDouble("call_overhead_us", 0.0, 0.0, 1e6);
  if (root.has("interconnect")) {
    ConfigNode link = root.child("interconnect");
    link.allowOnly({"gbs", "latency_us"});
    hw.interconnect_gbs = link.getDouble("gbs", 1e-6, kMaxRate);
    hw.interconnect_latency_us = link.getDouble("latency_us", 0.0, 0.0, 1e6);
  }
  ConfigNode int8 = root.child("int8");
  int8.allowOnly({"vnni", "max_bits_one", "max_bits_both"});
  hw.vnni = int8.getBool("vnni");
  hw.max_bits_one = static_cast<int>(int8.getInt("max_bits_one", 2, 8));
  hw.max_bits_both = static_cast<int>(int8.getInt("max_bits_both", 2, 8));
  if (hw.max_bits_both > hw.max_bits_one)
    int8.fail("max_bits_both", fmt::format("cannot exceed max_bits_one = {}", hw.max_bits_one));
  if (!hw.vnni && hw.max_bits_both > 7)
    int8.fail("max_bits_both", "without VNNI an 8 x 8 bit int8 GEMM saturates its 16-bit pair sums: at most 7");
  return hw;
}

}  // namespace

HardwareModel parseHardwareModel(const std::string& yaml_text, const std::string& source) {
  return fromNode(ConfigNode::loadString(yaml_text, source));
}

std::vector<std::string> hardwarePresetNames() {
  std::vector<std::string> names;
  for (const auto& [name, text] : kHardwarePresets) names.emplace_back(name);
  return names;
}

HardwareModel loadHardwareModel(const std::string& spec) {
  for (const auto& [name, text] : kHardwarePresets)
    if (spec == name) return parseHardwareModel(std::string(text), fmt::format("<hardware preset {}>", name));
  std::error_code ec;
  if (!std::filesystem::exists(spec, ec))
    throw Error(fmt::format("hardware '{}' is neither a preset ({}) nor an existing file", spec,
                            fmt::join(hardwarePresetNames(), ", ")));
  return fromNode(ConfigNode::loadFile(spec, InputKind::kHardwareModel));
}

std::string hardwareToYaml(const HardwareModel& hw) {
  auto rates = [&](double f32, double bf16, double int8, double fp8, double mxfp8) {
    std::string text = fmt::format("{{f32: {:.6g}, bf16: {:.6g}, int8: {:.6g}", f32, bf16, int8);
    if (fp8 > 0) text += fmt::format(", fp8: {:.6g}", fp8);
    if (mxfp8 > 0) text += fmt::format(", mxfp8: {:.6g}", mxfp8);
    return text + "}";
  };
  std::string out = fmt::format("# pgq hardware model. Rates in GFLOP/s (int8: GOP/s) and GB/s.\n"
                                "name: {}\nsource: \"{}\"\nthreads: {}\n",
                                hw.name, hw.source, hw.threads);
  if (hw.high_precision != DType::kF32) out += fmt::format("high_precision: {}\n", dtypeName(hw.high_precision));
  out += fmt::format("formats: [{}]\n", fmt::join(hw.formats, ", "));
  if (hw.cast_once) out += "cast_once: true\n";
  out += fmt::format("peak_gflops: {}\n", rates(hw.peak_f32, hw.peak_bf16, hw.peak_int8, hw.peak_fp8, hw.peak_mxfp8));
  out += fmt::format("gemm_gflops: {}\n", rates(hw.gemm_f32, hw.gemm_bf16, hw.gemm_int8, hw.gemm_fp8, hw.gemm_mxfp8));
  out += fmt::format("memory_bandwidth_gbs: {:.6g}\n# Derived: peak / bandwidth.\n", hw.bandwidth_gbs);
  out += fmt::format("ridge_flop_per_byte: {{f32: {:.4g}, bf16: {:.4g}, int8: {:.4g}{}}}\n", hw.ridge(DType::kF32),
                     hw.ridge(DType::kBF16), hw.ridge(DType::kS8),
                     hw.peak_fp8 > 0 ? fmt::format(", fp8: {:.4g}", hw.peak_fp8 / hw.bandwidth_gbs) : std::string());
  out += fmt::format("quantize_gbs: {{rtn: {:.6g}, sr: {:.6g}}}\ncall_overhead_us: {:.6g}\n", hw.quantize_rtn_gbs,
                     hw.quantize_sr_gbs, hw.call_overhead_us);
  out += fmt::format("int8: {{vnni: {}, max_bits_one: {}, max_bits_both: {}}}\n", hw.vnni ? "true" : "false",
                     hw.max_bits_one, hw.max_bits_both);
  if (hw.interconnect_gbs > 0)
    out += fmt::format("interconnect: {{gbs: {:.6g}, latency_us: {:.6g}}}\n", hw.interconnect_gbs,
                       hw.interconnect_latency_us);
  return out;
}

double estimateCollectiveUs(const HardwareModel& hw, CollectiveKind kind, double bytes, int64_t devices) {
  if (hw.interconnect_gbs <= 0 || devices <= 1) return 0;
  const double t = static_cast<double>(devices);
  const double share = (kind == CollectiveKind::kAllReduce ? 2.0 : 1.0) * (t - 1) / t;
  const double steps = (kind == CollectiveKind::kAllReduce ? 2.0 : 1.0) * (t - 1);
  return share * bytes / (hw.interconnect_gbs * 1e3) + steps * hw.interconnect_latency_us;
}

GemmEstimate estimateGemm(const HardwareModel& hw, const std::vector<int64_t>& shape, DType dtype, bool lhs_sr,
                          bool rhs_sr) {
  QuantFormat lhs = perChannelFormat(8, lhs_sr ? Rounding::kStochastic : Rounding::kNearest);
  QuantFormat rhs = perChannelFormat(8, rhs_sr ? Rounding::kStochastic : Rounding::kNearest);
  return estimateGemm(hw, shape, dtype, lhs, rhs);
}

GemmEstimate estimateGemm(const HardwareModel& hw, const std::vector<int64_t>& shape, DType dtype,
                          const QuantFormat& lhs, const QuantFormat& rhs, double lhs_share, double rhs_share) {
  const bool lhs_sr = lhs.rounding == Rounding::kStochastic, rhs_sr = rhs.rounding == Rounding::kStochastic;
  PGQ_ASSERT(shape.size() == 4, "gemm shape must be [batch, M, K, N]");
  const double b = static_cast<double>(shape[0]), m = static_cast<double>(shape[1]),
               k = static_cast<double>(shape[2]), n = static_cast<double>(shape[3]);
  const double flops = 2.0 * b * m * k * n;
  const double a_elems = b * m * k, b_elems = b * k * n, c_elems = b * m * n;
  const double bw = hw.bandwidth_gbs * 1e3;  // bytes per microsecond
  auto roofline = [&](double rate_gflops, double bytes) {
    return std::max(flops / (rate_gflops * 1e3), bytes / bw) + hw.call_overhead_us;
  };
  GemmEstimate e;
  double elem = static_cast<double>(dtypeSize(dtype));
  // Results are written in the high-precision dtype: f32 on CPUs, bf16 on GPUs (where an
  // FP8 GEMM's epilogue writes bf16 too).
  e.high_precision_us = roofline(hw.gemmRate(dtype), elem * (a_elems + b_elems + c_elems));
  // MX formats also move one E8M0 scale byte per block.
  auto stored = [](const QuantFormat& f) {
    return f.scale == ScaleKind::kF32 ? 1.0 : 1.0 + 1.0 / static_cast<double>(f.block);
  };
  e.int8_gemm_us = roofline(hw.gemmRate(lhs), stored(lhs) * a_elems + stored(rhs) * b_elems + elem * c_elems);
  // Quantizing an operand reads its high-precision values and writes one byte each.
  auto quantize = [&](double elems, bool sr) {
    double gbs = sr ? hw.quantize_sr_gbs : hw.quantize_rtn_gbs;
    return (elem + 1.0) * elems / (gbs * 1e3) + hw.call_overhead_us;
  };
  // The int8 rescale reads the s32 result and writes f32 in place; FP8 and MX GEMMs
  // apply their scales in the GEMM's epilogue (cuBLASLt's scale pointers, MX block scales
  // in the tensor core), so they write the result once, as the GEMM above counts.
  const bool fused_scales = lhs.isEmulated();
  e.quantization_us = lhs_share * quantize(a_elems, lhs_sr) + rhs_share * quantize(b_elems, rhs_sr) + (fused_scales ? 0.0 : 8.0 * c_elems / bw);
  return e;
}

}  // namespace pgq
