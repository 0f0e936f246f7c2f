#pragma once
// Typed GEMM metadata: the direction of a GEMM, the role of an operand, a
// tensor-parallel sharding kind, a recipe decision and which operand of a GEMM (and
// rope's rotation), each an enum made from gemm_meta.def together with its text names.
// Code compares these as values; the names are for files and messages only.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include <fmt/format.h>

namespace pgq {

enum class GemmDirection : uint8_t {
#define GEMM_DIRECTION(id, text) k##id,
#include "ir/gemm_meta.def"
};

enum class OperandRole : uint8_t {
#define OPERAND_ROLE(id, text) k##id,
#include "ir/gemm_meta.def"
};

enum class ShardingKind : uint8_t {
#define SHARDING_KIND(id, text) k##id,
#include "ir/gemm_meta.def"
};

enum class Decision : uint8_t {
#define GEMM_DECISION(id, text) k##id,
#include "ir/gemm_meta.def"
};

enum class GemmOperand : uint8_t {
#define GEMM_OPERAND(id, text) k##id,
#include "ir/gemm_meta.def"
};

enum class RopeRotation : uint8_t {
#define ROPE_ROTATION(id, text) k##id,
#include "ir/gemm_meta.def"
};

enum class DeviceGroup : uint8_t {
#define DEVICE_GROUP(id, text) k##id,
#include "ir/gemm_meta.def"
};

enum class Reduction : uint8_t {
#define REDUCTION(id, text) k##id,
#include "ir/gemm_meta.def"
};

// The roles of a GEMM's operands, indexed by GemmOperand: [lhs, rhs].
using OperandRoles = std::array<OperandRole, 2>;

namespace gemm_meta_detail {

template <typename E>
struct Names;

template <>
struct Names<GemmDirection> {
  static constexpr std::string_view kList[] = {
#define GEMM_DIRECTION(id, text) text,
#include "ir/gemm_meta.def"
  };
};

template <>
struct Names<OperandRole> {
  static constexpr std::string_view kList[] = {
#define OPERAND_ROLE(id, text) text,
#include "ir/gemm_meta.def"
  };
};

template <>
struct Names<ShardingKind> {
  static constexpr std::string_view kList[] = {
#define SHARDING_KIND(id, text) text,
#include "ir/gemm_meta.def"
  };
};

template <>
struct Names<Decision> {
  static constexpr std::string_view kList[] = {
#define GEMM_DECISION(id, text) text,
#include "ir/gemm_meta.def"
  };
};

template <>
struct Names<GemmOperand> {
  static constexpr std::string_view kList[] = {
#define GEMM_OPERAND(id, text) text,
#include "ir/gemm_meta.def"
  };
};

template <>
struct Names<RopeRotation> {
  static constexpr std::string_view kList[] = {
#define ROPE_ROTATION(id, text) text,
#include "ir/gemm_meta.def"
  };
};

template <>
struct Names<DeviceGroup> {
  static constexpr std::string_view kList[] = {
#define DEVICE_GROUP(id, text) text,
#include "ir/gemm_meta.def"
  };
};

template <>
struct Names<Reduction> {
  static constexpr std::string_view kList[] = {
#define REDUCTION(id, text) text,
#include "ir/gemm_meta.def"
  };
};

}  // namespace gemm_meta_detail

// The enums gemm_meta.def lists.
template <typename E>
concept GemmMetaEnum = requires { gemm_meta_detail::Names<E>::kList; };

// Every name of E, in enum order ("fwd", "bwd_dgrad", "bwd_wgrad").
template <GemmMetaEnum E>
constexpr std::span<const std::string_view> allNames() {
  return gemm_meta_detail::Names<E>::kList;
}

template <GemmMetaEnum E>
constexpr std::string_view nameOf(E value) {
  return allNames<E>()[static_cast<size_t>(value)];
}

// The value named `text`, or nullopt when no value of E has that name.
template <GemmMetaEnum E>
constexpr std::optional<E> parseName(std::string_view text) {
  std::span<const std::string_view> names = allNames<E>();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return static_cast<E>(i);
  return std::nullopt;
}

constexpr bool isBackward(GemmDirection direction) { return direction != GemmDirection::kFwd; }
constexpr size_t indexOf(GemmOperand operand) { return static_cast<size_t>(operand); }
constexpr GemmOperand otherOperand(GemmOperand operand) {
  return operand == GemmOperand::kLhs ? GemmOperand::kRhs : GemmOperand::kLhs;
}
constexpr RopeRotation inverseOf(RopeRotation rotation) {
  return rotation == RopeRotation::kForward ? RopeRotation::kInverse : RopeRotation::kForward;
}

// A policy's or a recipe's filter on GEMM directions: one direction, or "bwd" for both
// backward ones.
class DirectionFilter {
 public:
  explicit DirectionFilter(GemmDirection only) : only_(only) {}
  static DirectionFilter anyBackward() { return DirectionFilter(); }
  // fwd, bwd, bwd_dgrad or bwd_wgrad; nullopt for any other text.
  static std::optional<DirectionFilter> parse(std::string_view text);
  // The names parse() accepts, for messages.
  static std::span<const std::string_view> names();

  bool matches(GemmDirection direction) const { return only_ ? *only_ == direction : isBackward(direction); }
  std::string_view name() const { return only_ ? nameOf(*only_) : kAnyBackwardName; }

 private:
  static constexpr std::string_view kAnyBackwardName = "bwd";
  DirectionFilter() = default;
  std::optional<GemmDirection> only_;  // empty: either backward direction
};

}  // namespace pgq

// Formats as the text name, so messages and files write `fwd`, `weight`, `column`.
template <pgq::GemmMetaEnum E>
struct fmt::formatter<E> : fmt::formatter<std::string_view> {
  template <typename FormatContext>
  auto format(E value, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(pgq::nameOf(value), ctx);
  }
};
