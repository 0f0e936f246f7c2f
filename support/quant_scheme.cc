#include "support/quant_scheme.h"

#include <cstddef>

namespace pgq {
namespace {

constexpr std::string_view kFamilyNames[] = {
#define FORMAT_FAMILY(id, text) text,
#include "support/quant_schemes.def"
};

struct SchemeInfo {
  std::string_view name;
  FormatFamily family;
  Element operand_element, gradient_element;
  Granularity granularity;
  int block;
  ScaleKind scale;
  bool weight_2d;
};

constexpr SchemeInfo kSchemes[] = {
#define FORMAT_SCHEME(id, text, family, operand_element, gradient_element, granularity, block, scale, weight_2d) \
  {text, FormatFamily::k##family, Element::k##operand_element, Element::k##gradient_element,                    \
   Granularity::k##granularity, block, ScaleKind::k##scale, weight_2d},
#include "support/quant_schemes.def"
};

const SchemeInfo& infoOf(Scheme scheme) { return kSchemes[static_cast<size_t>(scheme)]; }

}  // namespace

std::string_view nameOf(FormatFamily family) { return kFamilyNames[static_cast<size_t>(family)]; }
std::string_view nameOf(Scheme scheme) { return infoOf(scheme).name; }

std::optional<FormatFamily> parseFormatFamily(std::string_view text) {
  for (FormatFamily family : kFormatFamilies)
    if (nameOf(family) == text) return family;
  return std::nullopt;
}

std::optional<Scheme> parseScheme(std::string_view text) {
  for (Scheme scheme : kFormatSchemes)
    if (nameOf(scheme) == text) return scheme;
  return std::nullopt;
}

FormatFamily formatFamily(const QuantFormat& format) {
  if (format.element == Element::kBf16) return FormatFamily::kBf16;
  const bool fp4 = format.element == Element::kE2M1;
  switch (format.scale) {
    // E2M1 with f32 scales has no hardware of its own; FP4 tensor cores read it as NVFP4.
    case ScaleKind::kF32: return fp4 ? FormatFamily::kNvfp4 : format.isFloat() ? FormatFamily::kFp8 : FormatFamily::kInt8;
    case ScaleKind::kE8M0:
      return fp4 ? FormatFamily::kMxfp4 : format.isFloat() ? FormatFamily::kMxfp8 : FormatFamily::kMxint8;
    case ScaleKind::kTwoLevel: return FormatFamily::kMossFp8;
    case ScaleKind::kE4M3: return FormatFamily::kNvfp4;
  }
  return FormatFamily::kInt8;
}

FormatFamily familyOf(Scheme scheme) { return infoOf(scheme).family; }

SchemeFormats schemeFormats(Scheme scheme, Rounding rounding, Rounding gradient_rounding) {
  const SchemeInfo& info = infoOf(scheme);
  auto format = [&](Element element, Rounding r) {
    QuantFormat f;
    f.element = element;
    f.bits = element == Element::kInt ? 8 : elementBits(element);
    f.granularity = info.granularity;
    f.block = info.block;
    f.rounding = r;
    f.scale = info.scale;
    return f;
  };
  // bf16 GEMMs round their operands to nearest, as autocast converts them.
  if (info.family == FormatFamily::kBf16) rounding = gradient_rounding = Rounding::kNearest;
  SchemeFormats formats{format(info.operand_element, rounding), format(info.operand_element, rounding),
                        format(info.gradient_element, gradient_rounding)};
  formats.weight.block2d = info.weight_2d;
  return formats;
}

}  // namespace pgq
