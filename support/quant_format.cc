#include "support/quant_format.h"

#include <charconv>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "support/errors.h"

namespace pgq {
namespace {

constexpr int kMaxBlock = 1 << 24;

std::vector<std::string_view> splitFields(std::string_view text) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    size_t colon = text.find(':', start);
    fields.push_back(text.substr(start, colon == std::string_view::npos ? colon : colon - start));
    if (colon == std::string_view::npos) return fields;
    start = colon + 1;
  }
}

template <typename T>
bool parseNumber(std::string_view text, T& value) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end;
}

[[noreturn]] void badText(std::string_view text, std::string_view why) {
  throw Error(fmt::format(
      "bad quantization format \"{}\": {} (expected <int<2..8>|e4m3|e5m2|e2m1|bf16>:<tensor|channel|block<N>|"
      "block<N>x<N>>:<rtn|sr>[:scale=e8m0|scale=two_level|scale=e4m3][:asym][:clip=mse|clip=p<percent>][:rht], "
      "e.g. int8:channel:rtn, e4m3:tensor:rtn, mxfp8_e4m3, nvfp4)",
      text, why));
}

// The canonical text of an MX alias (mxfp8_e4m3[:rtn|sr]), or empty.
std::string expandAlias(std::string_view text) {
  struct Alias {
    std::string_view name, canonical_head;
  };
  static constexpr Alias kAliases[] = {
      {"mxfp8_e4m3", "e4m3:block32"}, {"mxfp8_e5m2", "e5m2:block32"}, {"mxint8", "int8:block32"},
      {"mxfp4", "e2m1:block32"},      {"nvfp4", "e2m1:block16"},      {"bf16", "bf16:tensor"}};
  for (const Alias& a : kAliases) {
    if (text.substr(0, a.name.size()) != a.name) continue;
    std::string_view rest = text.substr(a.name.size());
    std::string rounding = "rtn";
    if (rest == ":sr" || rest == ":rtn") {
      rounding = std::string(rest.substr(1));
    } else if (!rest.empty()) {
      return "";
    }
    if (a.name == "bf16") return fmt::format("{}:{}", a.canonical_head, rounding);
    return fmt::format("{}:{}:scale={}", a.canonical_head, rounding, a.name == "nvfp4" ? "e4m3" : "e8m0");
  }
  return "";
}

}  // namespace

void QuantFormat::validate() const {
  if (element != Element::kInt) {
    if (bits != elementBits(element))
      throw Error(fmt::format("quant format: bits={} for {}, expected {}", bits, elementName(element),
                              elementBits(element)));
    if (asymmetric) throw Error(fmt::format("quant format: {} elements are symmetric (no asym)", elementName(element)));
    if (clipping != Clipping::kNone)
      throw Error(fmt::format("quant format: {} elements take no clip field (they saturate at their largest value)",
                              elementName(element)));
  }
  if (element == Element::kBf16 && (granularity != Granularity::kPerTensor || scale != ScaleKind::kF32 || hadamard))
    throw Error("quant format: bf16 elements take no scale (f32's exponent range): tensor granularity, no scale "
                "or rht field (bf16:tensor:rtn or bf16:tensor:sr)");
  if (scale != ScaleKind::kF32) {
    const char* name = scale == ScaleKind::kE8M0 ? "e8m0" : scale == ScaleKind::kE4M3 ? "e4m3" : "two_level";
    if (granularity != Granularity::kPerBlock)
      throw Error(fmt::format("quant format: scale={} needs block<N> granularity (e.g. block32, as MX), not {}", name,
                              granularityName(granularity)));
    if (asymmetric || clipping != Clipping::kNone)
      throw Error(fmt::format("quant format: scale={} takes no asym or clip field", name));
    if (scale == ScaleKind::kTwoLevel && element == Element::kInt)
      throw Error("quant format: scale=two_level (MOSS) needs an FP8 element (e4m3 or e5m2)");
    if (scale == ScaleKind::kTwoLevel && element == Element::kE2M1)
      throw Error("quant format: scale=two_level (MOSS) needs an FP8 element (e4m3 or e5m2), not e2m1");
    if (scale == ScaleKind::kE4M3 && element != Element::kE2M1)
      throw Error(fmt::format("quant format: scale=e4m3 (NVFP4) needs the e2m1 element, not {}", elementName(element)));
  }
  if (block2d && granularity != Granularity::kPerBlock)
    throw Error("quant format: 2-D blocks (block<N>x<N>) need per-block granularity");
  // The int8 kernels (computeQuantParams, quantize, the int8 GEMM) scale 1-D groups only;
  // tiles are the emulated formats' (fakeQuantize).
  if (block2d && !isEmulated())
    throw Error("quant format: 2-D blocks (block<N>x<N>) need a float element or a block scale (e.g. "
                "e2m1:block16x16:rtn:scale=e4m3, int8:block32x32:rtn:scale=e8m0); an integer grid with f32 scales "
                "takes 1-D blocks (block<N>)");
  if (hadamard && !isFloat())
    throw Error("quant format: rht (random Hadamard transform) needs a float element (e2m1, e4m3 or e5m2)");
  if (element != Element::kBf16 && (bits < 2 || bits > 8)) {
    throw Error(fmt::format("quant format: bits={} is unsupported, expected 2..8", bits));
  }
  if (granularity == Granularity::kPerBlock) {
    if (block < 1 || block > kMaxBlock) {
      throw Error(fmt::format(
          "quant format: block={} is invalid for per-block scales, expected 1..{}", block,
          kMaxBlock));
    }
  } else if (block != 0) {
    throw Error(fmt::format(
        "quant format: block={} given for {} scales, expected 0 (blocks are per-block only)", block,
        granularityName(granularity)));
  }
  if (clipping == Clipping::kPercentile && !(percentile > 0.0 && percentile <= 100.0)) {
    throw Error(fmt::format(
        "quant format: clipping percentile {} is out of range, expected (0, 100]", percentile));
  }
}

std::string QuantFormat::toString() const {
  std::string text = element == Element::kInt ? fmt::format("int{}:", bits) : fmt::format("{}:", elementName(element));
  switch (granularity) {
    case Granularity::kPerTensor: text += "tensor"; break;
    case Granularity::kPerChannel: text += "channel"; break;
    case Granularity::kPerBlock:
      text += block2d ? fmt::format("block{}x{}", block, block) : fmt::format("block{}", block);
      break;
  }
  text += rounding == Rounding::kNearest ? ":rtn" : ":sr";
  if (scale == ScaleKind::kE8M0) text += ":scale=e8m0";
  if (scale == ScaleKind::kTwoLevel) text += ":scale=two_level";
  if (scale == ScaleKind::kE4M3) text += ":scale=e4m3";
  if (asymmetric) text += ":asym";
  if (clipping == Clipping::kMse) text += ":clip=mse";
  // fmt prints the shortest text that parses back to the same double.
  if (clipping == Clipping::kPercentile) text += fmt::format(":clip=p{}", percentile);
  if (hadamard) text += ":rht";
  return text;
}

QuantFormat QuantFormat::parse(std::string_view text) {
  if (std::string canonical = expandAlias(text); !canonical.empty()) return parse(canonical);
  std::vector<std::string_view> fields = splitFields(text);
  if (fields.size() < 3) badText(text, "needs at least element, granularity and rounding");
  QuantFormat format;
  if (fields[0] == "e4m3") {
    format.element = Element::kE4M3;
  } else if (fields[0] == "e5m2") {
    format.element = Element::kE5M2;
  } else if (fields[0] == "e2m1") {
    format.element = Element::kE2M1;
    format.bits = elementBits(Element::kE2M1);
  } else if (fields[0] == "bf16") {
    format.element = Element::kBf16;
    format.bits = elementBits(Element::kBf16);
  } else if (fields[0].substr(0, 3) != "int" || !parseNumber(fields[0].substr(3), format.bits)) {
    badText(text, fmt::format("bad element field '{}'", fields[0]));
  }
  std::string_view granularity = fields[1];
  if (granularity == "tensor") {
    format.granularity = Granularity::kPerTensor;
  } else if (granularity == "channel") {
    format.granularity = Granularity::kPerChannel;
  } else if (granularity.substr(0, 5) == "block" &&
             parseNumber(granularity.substr(5), format.block)) {
    format.granularity = Granularity::kPerBlock;
  } else if (size_t x = granularity.find('x'); granularity.substr(0, 5) == "block" && x != std::string_view::npos &&
             parseNumber(granularity.substr(5, x - 5), format.block)) {
    int cols = 0;
    if (!parseNumber(granularity.substr(x + 1), cols) || cols != format.block)
      badText(text, fmt::format("bad granularity '{}': 2-D blocks are square, block<N>x<N>", granularity));
    format.granularity = Granularity::kPerBlock;
    format.block2d = true;
  } else {
    badText(text, fmt::format("bad granularity '{}'", granularity));
  }
  if (fields[2] == "rtn") {
    format.rounding = Rounding::kNearest;
  } else if (fields[2] == "sr") {
    format.rounding = Rounding::kStochastic;
  } else {
    badText(text, fmt::format("bad rounding '{}'", fields[2]));
  }
  bool seen_asym = false;
  bool seen_clip = false;
  bool seen_scale = false;
  for (size_t i = 3; i < fields.size(); ++i) {
    std::string_view field = fields[i];
    if ((field == "scale=e8m0" || field == "scale=two_level" || field == "scale=e4m3") && !seen_scale) {
      seen_scale = true;
      format.scale = field == "scale=e8m0"   ? ScaleKind::kE8M0
                     : field == "scale=e4m3" ? ScaleKind::kE4M3
                                             : ScaleKind::kTwoLevel;
    } else if (field == "rht" && !format.hadamard) {
      format.hadamard = true;
    } else if (field == "asym" && !seen_asym) {
      seen_asym = true;
      format.asymmetric = true;
    } else if (field == "clip=mse" && !seen_clip) {
      seen_clip = true;
      format.clipping = Clipping::kMse;
    } else if (field.substr(0, 6) == "clip=p" && !seen_clip) {
      seen_clip = true;
      format.clipping = Clipping::kPercentile;
      if (!parseNumber(field.substr(6), format.percentile) || !std::isfinite(format.percentile)) {
        badText(text, fmt::format("bad percentile '{}'", field.substr(6)));
      }
    } else {
      badText(text, fmt::format("unknown or repeated field '{}'", field));
    }
  }
  try {
    format.validate();
  } catch (const Error& error) {
    badText(text, error.what());
  }
  return format;
}

bool QuantFormat::operator==(const QuantFormat& other) const {
  // Field by field what toString() writes, without building the two texts: profiles
  // and recipes look formats up by value.
  return element == other.element && (isFloat() || bits == other.bits) && granularity == other.granularity &&
         (granularity != Granularity::kPerBlock || (block == other.block && block2d == other.block2d)) &&
         rounding == other.rounding && hadamard == other.hadamard &&
         scale == other.scale && asymmetric == other.asymmetric && clipping == other.clipping &&
         (clipping != Clipping::kPercentile || percentile == other.percentile);
}

QuantFormat perChannelFormat(int bits, Rounding rounding) {
  QuantFormat format;
  format.bits = bits;
  format.rounding = rounding;
  return format;
}

QuantFormat perTensorFormat(int bits, Rounding rounding) {
  QuantFormat format = perChannelFormat(bits, rounding);
  format.granularity = Granularity::kPerTensor;
  return format;
}

QuantFormat perBlockFormat(int bits, int block, Rounding rounding) {
  QuantFormat format = perChannelFormat(bits, rounding);
  format.granularity = Granularity::kPerBlock;
  format.block = block;
  return format;
}

int64_t quantBlockCount(const QuantFormat& format, int64_t contract) {
  if (format.granularity != Granularity::kPerBlock) return 1;
  return (contract + format.block - 1) / format.block;
}

int64_t quantGroupCount(const QuantFormat& format, int64_t batch, int64_t channels, int64_t contract) {
  switch (format.granularity) {
    case Granularity::kPerTensor: return 1;
    case Granularity::kPerChannel: return batch * channels;
    case Granularity::kPerBlock:
      // 2-D: tiles of block channels by block contracting elements.
      if (format.block2d) return batch * quantBlockCount(format, channels) * quantBlockCount(format, contract);
      return batch * channels * quantBlockCount(format, contract);
  }
  return 1;
}

int64_t quantParamCount(const QuantFormat& format, int64_t batch, int64_t channels, int64_t contract) {
  return quantGroupCount(format, batch, channels, contract) * (format.asymmetric ? 2 : 1);
}

ElementLimits elementLimits(const QuantFormat& format) {
  switch (format.element) {
    // OCP 8-bit Floating Point Specification (OFP8) rev. 1.0: E4M3 has bias 7, no
    // infinities and one NaN mantissa pattern, so its largest value is 1.75 * 2^8;
    // E5M2 has bias 15 and IEEE-style infinities, largest 1.75 * 2^15.
    case Element::kE4M3: return {448.0, -6, 8, 3};
    case Element::kE5M2: return {57344.0, -14, 15, 2};
    // OCP MX v1.0 sec. 5.3.3: FP4 E2M1 has bias 1, no infinities or NaN; its largest
    // value is 1.5 * 2^2 and its one subnormal 0.5.
    case Element::kE2M1: return {6.0, 0, 2, 1};
    // bfloat16: f32's exponent (bias 127) with 7 stored mantissa bits; its largest value
    // is (2 - 2^-7) * 2^127.
    case Element::kBf16: return {0x1.fep127, -126, 127, 7};
    case Element::kInt:
      // qmax, and for power-of-two scales the exponent that puts a group's absmax in
      // [2^(bits-2), 2^(bits-1)) steps: OCP MX's INT8 (emax 0, implicit scale 2^-6).
      return {double((1 << (format.bits - 1)) - 1), 0, format.bits - 2, 0};
  }
  return {};
}

const char* elementName(Element element) {
  switch (element) {
    case Element::kInt: return "int";
    case Element::kE4M3: return "e4m3";
    case Element::kE5M2: return "e5m2";
    case Element::kE2M1: return "e2m1";
    case Element::kBf16: return "bf16";
  }
  return "?";
}

int elementBits(Element element) {
  switch (element) {
    case Element::kInt: return 0;
    case Element::kE4M3:
    case Element::kE5M2: return 8;
    case Element::kE2M1: return 4;
    case Element::kBf16: return 16;
  }
  return 0;
}

const char* granularityName(Granularity granularity) {
  switch (granularity) {
    case Granularity::kPerTensor: return "per-tensor";
    case Granularity::kPerChannel: return "per-channel";
    case Granularity::kPerBlock: return "per-block";
  }
  return "?";
}

}  // namespace pgq
