#pragma once
// Format families and format schemes (support/quant_schemes.def), as enums. A family
// is what kind of GEMM a format makes (int8, fp8, mxfp8, ...: what a hardware model
// runs natively); a scheme is what a recipe quantizes a GEMM's operands to, by role
// (fp8: e4m3 weights and activations, e5m2 gradients). Code compares these as values;
// the names are for files, flags and messages only.
#include <cstdint>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "support/quant_format.h"

namespace pgq {

enum class FormatFamily : uint8_t {
#define FORMAT_FAMILY(id, text) k##id,
#include "support/quant_schemes.def"
};

enum class Scheme : uint8_t {
#define FORMAT_SCHEME(id, text, family, operand_element, gradient_element, granularity, block, scale, weight_2d) k##id,
#include "support/quant_schemes.def"
};

// Every family and every scheme, in the list's order (the order messages name them in).
inline constexpr FormatFamily kFormatFamilies[] = {
#define FORMAT_FAMILY(id, text) FormatFamily::k##id,
#include "support/quant_schemes.def"
};
inline constexpr Scheme kFormatSchemes[] = {
#define FORMAT_SCHEME(id, text, family, operand_element, gradient_element, granularity, block, scale, weight_2d) \
  Scheme::k##id,
#include "support/quant_schemes.def"
};

std::string_view nameOf(FormatFamily family);
std::string_view nameOf(Scheme scheme);
// The value named `text`, or nullopt when none has that name.
std::optional<FormatFamily> parseFormatFamily(std::string_view text);
std::optional<Scheme> parseScheme(std::string_view text);

// The family `format` belongs to: int8 (integer grid, f32 scales), fp8 (FP8 elements,
// f32 scales), mxfp8, mxint8 (power-of-two block scales), moss_fp8 (two-level scales),
// nvfp4 (e2m1, E4M3 block scales), mxfp4 (e2m1, E8M0 block scales) or bf16.
FormatFamily formatFamily(const QuantFormat& format);
// The family a scheme's GEMMs run in.
FormatFamily familyOf(Scheme scheme);

struct SchemeFormats {
  QuantFormat operand;   // activations (and weights, unless the scheme's weights are 2-D)
  QuantFormat weight;    // weights: operand's format, or its block x block tiles
  QuantFormat gradient;  // gradient operands
};
// The formats of `scheme` with the given roundings (int8: 8 bits per channel). Weights
// round as `rounding` says; bf16 always rounds to nearest.
SchemeFormats schemeFormats(Scheme scheme, Rounding rounding, Rounding gradient_rounding);

}  // namespace pgq

// Formats as the text name, so messages and files write `fp8`, `moss_fp8`.
template <>
struct fmt::formatter<pgq::FormatFamily> : fmt::formatter<std::string_view> {
  template <typename FormatContext>
  auto format(pgq::FormatFamily value, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(pgq::nameOf(value), ctx);
  }
};

template <>
struct fmt::formatter<pgq::Scheme> : fmt::formatter<std::string_view> {
  template <typename FormatContext>
  auto format(pgq::Scheme value, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(pgq::nameOf(value), ctx);
  }
};
