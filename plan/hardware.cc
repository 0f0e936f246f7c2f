#include "plan/hardware.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/config_file.h"
#include "support/errors.h"
#include "support/escape.h"
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
    case FormatFamily::kMxint8:
    case FormatFamily::kNvfp4:
    case FormatFamily::kMxfp4:
    case FormatFamily::kBf16: return false;
  }
  return false;
}

// FP4 tensor cores (Blackwell's, CDNA 4's) run these, at the FP4 rate.
bool runsOnFp4Cores(FormatFamily family) {
  return family == FormatFamily::kNvfp4 || family == FormatFamily::kMxfp4;
}

}  // namespace

double HardwareModel::gemmRate(const QuantFormat& format) const {
  const FormatFamily family = formatFamily(format);
  if (family == FormatFamily::kMxfp8) return gemm_mxfp8 > 0 ? gemm_mxfp8 : gemm_fp8;
  if (family == FormatFamily::kBf16) return gemm_bf16;
  if (runsOnFp4Cores(family)) return gemm_fp4;
  return runsOnFp8Cores(family) ? gemm_fp8 : gemm_int8;
}

std::string HardwareModel::int8Limits() const {
  return fmt::format("{}: exact up to {} x {} bits", vnni ? "VNNI" : "no VNNI", max_bits_one, max_bits_both);
}

namespace {

constexpr double kMaxRate = 1e9;  // GFLOP/s or GB/s: anything above is a typo

// The GEMM alone on a GPU's shape model: padded output tiles at the per-SM rate over the
// SMs they (and split-K) occupy, a fixed cost per wave of tiles and the launch; never
// below its memory time. scripts/gpu_model.py gemm_us is the same function.
double shapeModelUs(const GemmShapeModel& model, const GemmShapeModel::Format& f, double rate_gflops,
                    const std::vector<int64_t>& shape, double bytes, double bytes_per_us) {
  const double b = static_cast<double>(shape[0]), m = static_cast<double>(shape[1]),
               k = static_cast<double>(shape[2]), n = static_cast<double>(shape[3]);
  const double tile = static_cast<double>(model.tile), sms = static_cast<double>(model.sms);
  const double tiles = b * std::ceil(m / tile) * std::ceil(n / tile);
  const double splits = std::min(static_cast<double>(f.max_split_k), std::ceil(k / tile));
  const double used = std::min(sms, std::max(tiles, std::min(static_cast<double>(f.split_k_sms), tiles * splits)));
  const double per_sm_gflops = rate_gflops / sms;
  const double compute =
      2.0 * tiles * tile * tile * k / used / (per_sm_gflops * 1e3) + std::max(1.0, tiles / sms) * f.tile_us;
  return f.launch_us + std::max(compute, bytes / bytes_per_us);
}

GemmShapeModel::Format shapeFormat(const ConfigNode& node, int64_t sms) {
  node.allowOnly({"max_split_k", "split_k_sms", "tile_us", "launch_us"});
  GemmShapeModel::Format f;
  f.max_split_k = node.getInt("max_split_k", 1, 64);
  f.split_k_sms = node.getInt("split_k_sms", 1, sms);
  f.tile_us = node.getDouble("tile_us", 0.0, 1e4);
  f.launch_us = node.getDouble("launch_us", 0.0, 1e4);
  return f;
}

GemmShapeModel shapeModel(const ConfigNode& node) {
  node.allowOnly({"sms", "tile", "bf16", "fp8"});
  GemmShapeModel model;
  model.sms = node.getInt("sms", 1, 1 << 20);
  model.tile = node.getInt("tile", 8, 1024);
  model.bf16 = shapeFormat(node.child("bf16"), model.sms);
  model.fp8 = shapeFormat(node.child("fp8"), model.sms);
  return model;
}

std::vector<MeasuredGemm> measuredGemms(const ConfigNode& list) {
  std::vector<MeasuredGemm> rows;
  for (const ConfigNode& item : list.items()) {
    item.allowOnly({"b", "m", "k", "n", "bf16_us", "fp8_us"});
    MeasuredGemm row;
    for (size_t i = 0; i < 4; ++i) row.shape[i] = item.getInt(std::string(1, "bmkn"[i]), 1, int64_t{1} << 40);
    row.bf16_us = item.getDouble("bf16_us", 1e-6, 1e9);
    // 0: not measured (batched GEMMs have no FP8 kernel to time).
    row.fp8_us = item.getDouble("fp8_us", 0.0, 0.0, 1e9);
    if (row.fp8_us > 0 && row.fp8_us < 1e-6) item.fail("fp8_us", "expected 0 (not measured) or a time > 0 us");
    // A shape timed twice is a table pasted together (and would count twice in the fit's
    // check below).
    for (const MeasuredGemm& earlier : rows)
      if (earlier.shape == row.shape)
        item.failHere(fmt::format("shape [{}] is listed again (measured_gemms[{}])", fmt::join(row.shape, ", "),
                                  &earlier - rows.data()));
    rows.push_back(row);
  }
  if (rows.empty()) list.failHere("lists no GEMM");
  return rows;
}

// A gemm_model must predict the table it comes with: a hand-edited constant or a probe
// that went wrong shows here, not in a recipe.
void checkAgainstMeasured(const ConfigNode& root, const HardwareModel& hw) {
  std::vector<double> bf16, fp8;
  for (const MeasuredGemm& row : hw.measured_gemms) {
    GpuGemmEstimate e = estimateGpuGemm(hw, row.shape);
    bf16.push_back(std::abs(e.bf16_us / row.bf16_us - 1));
    if (row.fp8_us > 0 && hw.gemm_fp8 > 0) fp8.push_back(std::abs(e.fp8_us / row.fp8_us - 1));
  }
  for (auto [errors, format] : {std::pair{&bf16, "bf16"}, {&fp8, "fp8"}}) {
    if (errors->empty()) continue;
    std::nth_element(errors->begin(), errors->begin() + static_cast<std::ptrdiff_t>(errors->size() / 2), errors->end());
    const double median = (*errors)[errors->size() / 2];
    if (median > 0.25)
      root.fail("gemm_model", fmt::format("predicts the {} times of measured_gemms with a median error of {:.0f}% "
                                          "(at most 25%): refit it (scripts/gpu_model.py, pgq gpuprobe)",
                                          format, 100 * median));
  }
}

double rate(const ConfigNode& map, std::string_view key) {
  return map.getDouble(key, 1e-6, kMaxRate);
}

HardwareModel fromNode(const ConfigNode& root) {
  root.allowOnly({"name", "source", "threads", "peak_gflops", "gemm_gflops", "memory_bandwidth_gbs",
                  "ridge_flop_per_byte", "quantize_gbs", "call_overhead_us", "int8", "interconnect", "formats",
                  "high_precision", "cast_once", "gemm_model", "attention", "measured_gemms"});
  HardwareModel hw;
  hw.name = root.getString("name");
  hw.source = root.getString("source", "");
  hw.threads = root.getInt("threads", 1, 1 << 20);
  ConfigNode peak = root.child("peak_gflops");
  peak.allowOnly({"f32", "bf16", "int8", "fp8", "mxfp8", "fp4"});
  hw.peak_f32 = rate(peak, "f32");
  hw.peak_bf16 = rate(peak, "bf16");
  hw.peak_int8 = rate(peak, "int8");
  hw.peak_fp8 = peak.getDouble("fp8", 0.0, 0.0, kMaxRate);
  hw.peak_mxfp8 = peak.getDouble("mxfp8", 0.0, 0.0, kMaxRate);
  hw.peak_fp4 = peak.getDouble("fp4", 0.0, 0.0, kMaxRate);
  ConfigNode gemm = root.child("gemm_gflops");
  gemm.allowOnly({"f32", "bf16", "int8", "fp8", "mxfp8", "fp4"});
  hw.gemm_f32 = rate(gemm, "f32");
  hw.gemm_bf16 = rate(gemm, "bf16");
  hw.gemm_int8 = rate(gemm, "int8");
  hw.gemm_fp8 = gemm.getDouble("fp8", 0.0, 0.0, kMaxRate);
  hw.gemm_mxfp8 = gemm.getDouble("mxfp8", 0.0, 0.0, kMaxRate);
  hw.gemm_fp4 = gemm.getDouble("fp4", 0.0, 0.0, kMaxRate);
  if (hw.gemm_fp4 > hw.peak_fp4 * 1.05 ||
      hw.gemm_f32 > hw.peak_f32 * 1.05 || hw.gemm_bf16 > hw.peak_bf16 * 1.05 || hw.gemm_int8 > hw.peak_int8 * 1.05 ||
      hw.gemm_fp8 > hw.peak_fp8 * 1.05 || hw.gemm_mxfp8 > std::max(hw.peak_mxfp8, hw.peak_fp8) * 1.05)
    root.fail("gemm_gflops", "achieved GEMM rates cannot exceed the peak rates");
  if ((hw.peak_fp8 > 0) != (hw.gemm_fp8 > 0))
    root.fail(hw.peak_fp8 > 0 ? "gemm_gflops" : "peak_gflops", "fp8 needs both a peak and an achieved GEMM rate");
  if ((hw.peak_fp4 > 0) != (hw.gemm_fp4 > 0))
    root.fail(hw.peak_fp4 > 0 ? "gemm_gflops" : "peak_gflops", "fp4 needs both a peak and an achieved GEMM rate");
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
      if (runsOnFp4Cores(*family) && hw.gemm_fp4 <= 0)
        root.fail("formats", fmt::format("lists '{}' but peak_gflops / gemm_gflops give no fp4 rate (FP4 tensor "
                                         "cores: Blackwell, CDNA 4; Hopper and CDNA 3 have none)",
                                         name));
      hw.formats.push_back(*family);
    }
    if (hw.formats.empty())
      root.fail("formats", fmt::format("lists no format family ({})", fmt::join(kFormatFamilies, ", ")));
  } else if (hw.gemm_fp8 > 0) {
    hw.formats = {FormatFamily::kInt8, FormatFamily::kFp8};
  }
  hw.cast_once = root.getBool("cast_once", false);
  hw.high_precision = root.getEnum("high_precision", {"f32", "bf16"}, "f32") == "bf16" ? DType::kBF16 : DType::kF32;
  if (hw.runsFamily(FormatFamily::kBf16) && hw.high_precision == DType::kBF16)
    root.fail("formats", "lists 'bf16', the high precision here: a GEMM kept runs in bf16 already (bf16 is a "
                         "choice where GEMMs are kept in f32, on CPUs)");
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
  if (root.has("gemm_model")) hw.gemm_model = shapeModel(root.child("gemm_model"));
  if (root.has("attention")) {
    ConfigNode attention = root.child("attention");
    attention.allowOnly({"fused", "fwd_efficiency", "bwd_efficiency"});
    hw.attention.fused = attention.getBool("fused");
    if (hw.attention.fused && hw.gemm_model.sms == 0)
      attention.fail("fused", "a fused attention kernel is estimated on a gemm_model (its tile and launch): add one");
    if (hw.attention.fused) {
      hw.attention.fwd_efficiency = attention.getDouble("fwd_efficiency", 1e-3, 1.0);
      hw.attention.bwd_efficiency = attention.getDouble("bwd_efficiency", 1e-3, 1.0);
    }
  }
  if (root.has("measured_gemms")) {
    if (hw.gemm_model.sms == 0)
      root.fail("measured_gemms", "a table of measured GEMMs needs the gemm_model fitted to it");
    hw.measured_gemms = measuredGemms(root.child("measured_gemms"));
    checkAgainstMeasured(root, hw);
  }
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
  auto rates = [&](double f32, double bf16, double int8, double fp8, double mxfp8, double fp4) {
    std::string text = fmt::format("{{f32: {:.6g}, bf16: {:.6g}, int8: {:.6g}", f32, bf16, int8);
    if (fp8 > 0) text += fmt::format(", fp8: {:.6g}", fp8);
    if (mxfp8 > 0) text += fmt::format(", mxfp8: {:.6g}", mxfp8);
    if (fp4 > 0) text += fmt::format(", fp4: {:.6g}", fp4);
    return text + "}";
  };
  std::string out = fmt::format("# pgq hardware model. Rates in GFLOP/s (int8: GOP/s) and GB/s.\n"
                                "name: {}\nsource: {}\nthreads: {}\n",
                                yamlScalar(hw.name), quoted(hw.source, QuoteStyle::kJson), hw.threads);
  if (hw.high_precision != DType::kF32) out += fmt::format("high_precision: {}\n", dtypeName(hw.high_precision));
  out += fmt::format("formats: [{}]\n", fmt::join(hw.formats, ", "));
  if (hw.cast_once) out += "cast_once: true\n";
  out += fmt::format("peak_gflops: {}\n", rates(hw.peak_f32, hw.peak_bf16, hw.peak_int8, hw.peak_fp8, hw.peak_mxfp8, hw.peak_fp4));
  out += fmt::format("gemm_gflops: {}\n", rates(hw.gemm_f32, hw.gemm_bf16, hw.gemm_int8, hw.gemm_fp8, hw.gemm_mxfp8, hw.gemm_fp4));
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
  if (hw.gemm_model.sms > 0) {
    auto format = [](const GemmShapeModel::Format& f) {
      return fmt::format("{{max_split_k: {}, split_k_sms: {}, tile_us: {:.6g}, launch_us: {:.6g}}}", f.max_split_k,
                         f.split_k_sms, f.tile_us, f.launch_us);
    };
    out += fmt::format("gemm_model:\n  sms: {}\n  tile: {}\n  bf16: {}\n  fp8: {}\n", hw.gemm_model.sms,
                       hw.gemm_model.tile, format(hw.gemm_model.bf16), format(hw.gemm_model.fp8));
  }
  if (hw.attention.fused)
    out += fmt::format("attention: {{fused: true, fwd_efficiency: {:.6g}, bwd_efficiency: {:.6g}}}\n",
                       hw.attention.fwd_efficiency, hw.attention.bwd_efficiency);
  if (!hw.measured_gemms.empty()) {
    out += "measured_gemms:\n";
    for (const MeasuredGemm& row : hw.measured_gemms)
      out += fmt::format("  - {{b: {}, m: {}, k: {}, n: {}, bf16_us: {:.6g}, fp8_us: {:.6g}}}\n", row.shape[0],
                         row.shape[1], row.shape[2], row.shape[3], row.bf16_us, row.fp8_us);
  }
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
  PGQ_ASSERT(shape.size() == 4, "gemm shape must be [batch, M, K, N]");
  const double b = static_cast<double>(shape[0]), m = static_cast<double>(shape[1]),
               k = static_cast<double>(shape[2]), n = static_cast<double>(shape[3]);
  const double flops = 2.0 * b * m * k * n;
  const double a_elems = b * m * k, b_elems = b * k * n, c_elems = b * m * n;
  const double bw = hw.bandwidth_gbs * 1e3;  // bytes per microsecond
  auto roofline = [&](double rate_gflops, double bytes) {
    return std::max(flops / (rate_gflops * 1e3), bytes / bw) + hw.call_overhead_us;
  };
  // A GPU's shape model, with the constants of its 2-byte or 1-byte operand kernels.
  auto gemmUs = [&](double rate_gflops, double bytes, bool one_byte) {
    if (hw.gemm_model.sms == 0) return roofline(rate_gflops, bytes);
    return shapeModelUs(hw.gemm_model, one_byte ? hw.gemm_model.fp8 : hw.gemm_model.bf16, rate_gflops, shape, bytes,
                        bw);
  };
  GemmEstimate e;
  double elem = static_cast<double>(dtypeSize(dtype));
  // Results are written in the high-precision dtype: f32 on CPUs, bf16 on GPUs (where an
  // FP8 GEMM's epilogue writes bf16 too).
  e.high_precision_us = gemmUs(hw.gemmRate(dtype), elem * (a_elems + b_elems + c_elems), false);
  // Bytes per element: one (FP8, int8), half (E2M1) or two (bf16), plus one scale byte
  // per block for MX and NVFP4 (E8M0 or E4M3; per 16 x 16 tile for 2-D NVFP4 weights).
  auto elementBytes = [](const QuantFormat& f) {
    return f.element == Element::kE2M1 ? 0.5 : f.element == Element::kBf16 ? 2.0 : 1.0;
  };
  auto stored = [&](const QuantFormat& f) {
    const double element = elementBytes(f);
    if (f.scale == ScaleKind::kF32) return element;
    const double block = static_cast<double>(f.block);
    return element + 1.0 / (f.block2d ? block * block : block);
  };
  e.int8_gemm_us = gemmUs(hw.gemmRate(lhs), stored(lhs) * a_elems + stored(rhs) * b_elems + elem * c_elems,
                         elementBytes(lhs) <= 1.0);
  // Quantizing an operand reads its high-precision values and writes its elements (one
  // byte, half for E2M1; the scales are too few to count).
  // A random Hadamard transform adds a 16 x 16 matrix product per 16 elements (32 flop
  // per element) at the bf16 GEMM rate: Transformer Engine runs it on the tensor cores,
  // fused into the cast (its hadamard_transform_cast_fusion kernel), so it adds compute
  // time, not traffic.
  auto quantize = [&](double elems, const QuantFormat& f) {
    double gbs = f.rounding == Rounding::kStochastic ? hw.quantize_sr_gbs : hw.quantize_rtn_gbs;
    const double hadamard = f.hadamard ? 32.0 * elems / (hw.gemm_bf16 * 1e3) : 0.0;
    const double element = elementBytes(f);
    return (elem + element) * elems / (gbs * 1e3) + hadamard + hw.call_overhead_us;
  };
  // The int8 rescale reads the s32 result and writes f32 in place; FP8 and MX GEMMs
  // apply their scales in the GEMM's epilogue (cuBLASLt's scale pointers, MX block scales
  // in the tensor core), so they write the result once, as the GEMM above counts.
  const bool fused_scales = lhs.isEmulated();
  e.quantization_us = lhs_share * quantize(a_elems, lhs) + rhs_share * quantize(b_elems, rhs) +
                      (fused_scales ? 0.0 : 8.0 * c_elems / bw);
  return e;
}

GpuGemmEstimate estimateGpuGemm(const HardwareModel& hw, const std::array<int64_t, 4>& shape) {
  static const QuantFormat kE4m3 = QuantFormat::parse("e4m3:tensor:rtn");
  const std::vector<int64_t> s(shape.begin(), shape.end());
  GpuGemmEstimate out;
  // Each operand's cast alone: the estimate with the other operand's share of its cast 0.
  GemmEstimate a = estimateGemm(hw, s, DType::kBF16, kE4m3, kE4m3, 1.0, 0.0);
  out.bf16_us = a.high_precision_us;
  out.fp8_us = a.int8_gemm_us;
  out.a_cast_us = a.quantization_us;
  out.b_cast_us = estimateGemm(hw, s, DType::kBF16, kE4m3, kE4m3, 0.0, 1.0).quantization_us;
  out.extrapolation = extrapolationOf(hw, shape);
  return out;
}

double extrapolationOf(const HardwareModel& hw, const std::array<int64_t, 4>& shape) {
  if (hw.measured_gemms.empty()) return 0;
  std::array<int64_t, 4> lo = hw.measured_gemms.front().shape, hi = lo;
  for (const MeasuredGemm& row : hw.measured_gemms)
    for (size_t i = 0; i < 4; ++i) {
      lo[i] = std::min(lo[i], row.shape[i]);
      hi[i] = std::max(hi[i], row.shape[i]);
    }
  double ratio = 1.0;
  for (size_t i = 0; i < 4; ++i) {
    const double d = static_cast<double>(shape[i]);
    ratio = std::max({ratio, static_cast<double>(lo[i]) / d, d / static_cast<double>(hi[i])});
  }
  return ratio;
}

double estimateFlashAttentionUs(const HardwareModel& hw, int64_t heads, int64_t t, int64_t dh, bool backward) {
  PGQ_ASSERT(hw.attention.fused && hw.gemm_model.sms > 0, "flash attention needs a fused attention model");
  const double tile = static_cast<double>(hw.gemm_model.tile);
  const double blocks = std::ceil(static_cast<double>(t) / tile);
  // Causal: the blocks of scores on and below the diagonal.
  const double scores = static_cast<double>(heads) * blocks * (blocks + 1) / 2 * tile * tile;
  // Forward: q.k^T and p.v (4 flop per score and head dim), q, k, v read and o written.
  // Backward: q.k^T again, dp, dv, dk, dq (10 flop), 16 passes over a head's tensors.
  const double flop = backward ? 10.0 : 4.0, tensors = backward ? 16.0 : 4.0;
  const double efficiency = backward ? hw.attention.bwd_efficiency : hw.attention.fwd_efficiency;
  const double compute = scores * flop * static_cast<double>(dh) / (efficiency * hw.peak_bf16 * 1e3);
  const double memory = static_cast<double>(heads * t * dh) * 2.0 * tensors / (hw.bandwidth_gbs * 1e3);
  return hw.gemm_model.bf16.launch_us + compute + memory;
}

std::optional<double> fusedAttentionUs(const HardwareModel& hw, const std::vector<int64_t>& shape,
                                       GemmDirection direction, const OperandRoles& roles) {
  if (!hw.attention.fused || shape.size() != 4 || shape[0] <= 1) return std::nullopt;
  if (roles[0] == OperandRole::kWeight || roles[1] == OperandRole::kWeight) return std::nullopt;
  const int64_t m = shape[1], k = shape[2], n = shape[3];
  // [heads, T, dh, T] (scores, dp), [heads, T, T, dh] (p.v, dq, dk, dv): T is the repeated dim.
  int64_t t = 0, dh = 0;
  if (m == n) {
    t = m, dh = k;
  } else if (m == k) {
    t = m, dh = n;
  } else if (k == n) {
    t = k, dh = m;
  } else {
    return std::nullopt;
  }
  const bool backward = direction != GemmDirection::kFwd;
  return estimateFlashAttentionUs(hw, shape[0], t, dh, backward) / (backward ? 4.0 : 2.0);
}

}  // namespace pgq
