#include "plan/profile_request.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "support/errors.h"

namespace pgq {

ProfileCandidate parseProfileCandidate(std::string_view text) {
  if (std::optional<Scheme> scheme = parseScheme(text)) return *scheme;
  try {
    return QuantFormat::parse(text);
  } catch (const Error& e) {
    throw Error(fmt::format("'{}' is neither a format scheme ({}) nor a format: {}", text,
                            fmt::join(kFormatSchemes, ", "), e.what()));
  }
}

namespace {

template <class T>
void once(std::vector<T>& list, const T& item) {
  if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
}

// The output pairs list the asked integer formats first, then int8 per channel (the
// statistics nodes' formats take int8 first): the order they have always had.
std::vector<FormatPair> outputPairs(const ProfileAsk& ask, const HardwareModel& cpu) {
  std::vector<FormatPair> pairs;
  const std::pair<ScaleLayout, int> integers[] = {{ask.granularity, ask.bits}, {ScaleLayout{}, 8}};
  for (const auto& [scales, asked] : integers) {
    const int bits = std::min(asked, cpu.max_bits_both);
    const QuantFormat rtn = scales.withBits(bits, Rounding::kNearest);
    once(pairs, FormatPair{rtn, rtn});
    once(pairs, FormatPair{rtn, scales.withBits(bits, Rounding::kStochastic)});
  }
  for (const ProfileCandidate& candidate : ask.candidates) {
    const Scheme* scheme = std::get_if<Scheme>(&candidate);
    if (!scheme || *scheme == Scheme::kInt8) continue;
    const SchemeFormats rtn = schemeFormats(*scheme, Rounding::kNearest, Rounding::kNearest),
                        sr = schemeFormats(*scheme, Rounding::kNearest, Rounding::kStochastic);
    once(pairs, FormatPair{rtn.operand, rtn.gradient});
    once(pairs, FormatPair{rtn.operand, sr.gradient});
  }
  return pairs;
}

}  // namespace

ProfileRequest profileRequest(const ProfileAsk& ask, const HardwareModel& cpu) {
  ProfileRequest r;
  auto integer = [&](const ScaleLayout& scales, int bits) {
    std::vector<int> widths{std::min(bits, cpu.max_bits_one)};
    if (widths[0] > cpu.max_bits_both) widths.push_back(cpu.max_bits_both);
    for (int b : widths) {
      const QuantFormat rtn = scales.withBits(b, Rounding::kNearest);
      if (std::find(r.formats.begin(), r.formats.end(), rtn) != r.formats.end()) continue;
      r.formats.push_back(rtn);
      r.gradient_formats.push_back(scales.withBits(b, Rounding::kStochastic));
    }
  };
  integer(ScaleLayout{}, 8);
  integer(ask.granularity, ask.bits);
  for (const ProfileCandidate& candidate : ask.candidates) {
    if (const QuantFormat* format = std::get_if<QuantFormat>(&candidate)) {
      once(r.formats, *format);
      continue;
    }
    const Scheme scheme = std::get<Scheme>(candidate);
    if (scheme == Scheme::kInt8) continue;  // always profiled
    SchemeFormats rtn = schemeFormats(scheme, Rounding::kNearest, Rounding::kNearest),
                  sr = schemeFormats(scheme, Rounding::kNearest, Rounding::kStochastic);
    // 4-bit schemes: also with the random Hadamard transform, which a policy may ask for
    // on any direction (the recipe generator reads both).
    const bool four_bit = familyOf(scheme) == FormatFamily::kNvfp4 || familyOf(scheme) == FormatFamily::kMxfp4;
    for (bool hadamard : {false, true}) {
      if (hadamard && !four_bit) break;
      for (QuantFormat* f : {&rtn.operand, &rtn.weight, &rtn.gradient, &sr.gradient}) f->hadamard = hadamard;
      once(r.formats, rtn.operand);
      once(r.formats, rtn.weight);
      once(r.gradient_formats, rtn.gradient);
      once(r.gradient_formats, sr.gradient);
    }
  }
  r.outputs = ask.outputs;
  if (ask.metrics) {
    r.metrics = true;
    r.output_pairs = outputPairs(ask, cpu);
  }
  return r;
}

}  // namespace pgq
