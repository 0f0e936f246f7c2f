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
      "bad quantization format \"{}\": {} (expected int<2..8>:<tensor|channel|block<N>>:<rtn|sr>"
      "[:asym][:clip=mse|clip=p<percent>], e.g. int8:channel:rtn)",
      text, why));
}

}  // namespace

void QuantFormat::validate() const {
  if (bits < 2 || bits > 8) {
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
  std::string text = fmt::format("int{}:", bits);
  switch (granularity) {
    case Granularity::kPerTensor: text += "tensor"; break;
    case Granularity::kPerChannel: text += "channel"; break;
    case Granularity::kPerBlock: text += fmt::format("block{}", block); break;
  }
  text += rounding == Rounding::kNearest ? ":rtn" : ":sr";
  if (asymmetric) text += ":asym";
  if (clipping == Clipping::kMse) text += ":clip=mse";
  // fmt prints the shortest text that parses back to the same double.
  if (clipping == Clipping::kPercentile) text += fmt::format(":clip=p{}", percentile);
  return text;
}

QuantFormat QuantFormat::parse(std::string_view text) {
  std::vector<std::string_view> fields = splitFields(text);
  if (fields.size() < 3) badText(text, "needs at least bits, granularity and rounding");
  QuantFormat format;
  if (fields[0].substr(0, 3) != "int" || !parseNumber(fields[0].substr(3), format.bits)) {
    badText(text, fmt::format("bad bits field '{}'", fields[0]));
  }
  std::string_view granularity = fields[1];
  if (granularity == "tensor") {
    format.granularity = Granularity::kPerTensor;
  } else if (granularity == "channel") {
    format.granularity = Granularity::kPerChannel;
  } else if (granularity.substr(0, 5) == "block" &&
             parseNumber(granularity.substr(5), format.block)) {
    format.granularity = Granularity::kPerBlock;
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
  for (size_t i = 3; i < fields.size(); ++i) {
    std::string_view field = fields[i];
    if (field == "asym" && !seen_asym) {
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
  return toString() == other.toString();
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
    case Granularity::kPerBlock: return batch * channels * quantBlockCount(format, contract);
  }
  return 1;
}

int64_t quantParamCount(const QuantFormat& format, int64_t batch, int64_t channels, int64_t contract) {
  return quantGroupCount(format, batch, channels, contract) * (format.asymmetric ? 2 : 1);
}

const char* granularityName(Granularity granularity) {
  switch (granularity) {
    case Granularity::kPerTensor: return "per-tensor";
    case Granularity::kPerChannel: return "per-channel";
    case Granularity::kPerBlock: return "per-block";
  }
  return "?";
}

const char* roundingName(Rounding rounding) {
  return rounding == Rounding::kNearest ? "round-to-nearest" : "stochastic";
}

}  // namespace pgq
