#pragma once
// Typed node attributes. A key (from attrs.def) has exactly one value kind, so an
// attribute can never hold the wrong kind of value: setters and getters check it.
// Besides numbers, strings and lists, a value may be GEMM metadata (ir/gemm_meta.h),
// a quantization format or rope's rotation, held parsed: it was checked when it was made.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ir/gemm_meta.h"
#include "support/quant_format.h"

namespace pgq {

enum class AttrKey : uint8_t {
#define ATTR(id, text, kind) k##id,
#include "ir/attrs.def"
#undef ATTR
};

// The value kinds, in the order of AttrValue's alternatives.
enum class AttrKind : uint8_t {
  kInt, kFloat, kString, kInts, kStrings, kDirection, kRoles, kSharding, kOperand, kFormat, kFormats, kRotation,
  kGroup, kReduction,
};

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<std::string>,
                               GemmDirection, OperandRoles, ShardingKind, GemmOperand, QuantFormat,
                               std::vector<QuantFormat>, RopeRotation, DeviceGroup, Reduction>;

std::string_view attrName(AttrKey key);
AttrKind attrKind(AttrKey key);
std::string_view attrKindName(AttrKind kind);
std::optional<AttrKey> parseAttrKey(std::string_view text);
AttrKind kindOf(const AttrValue& value);

// A small set of attributes kept sorted by key, so equal sets compare, hash and print
// identically whatever order they were set in.
class Attrs {
 public:
  bool has(AttrKey key) const { return find(key) != nullptr; }
  bool empty() const { return entries_.empty(); }
  // Sets (or replaces) a value; asserts that the value's kind is the key's kind.
  void set(AttrKey key, AttrValue value);
  void erase(AttrKey key);

  // Getters assert presence and kind; the *Or variants return a default when absent.
  int64_t getInt(AttrKey key) const;
  double getFloat(AttrKey key) const;
  const std::string& getString(AttrKey key) const;
  const std::vector<int64_t>& getInts(AttrKey key) const;
  const std::vector<std::string>& getStrings(AttrKey key) const;
  GemmDirection getDirection(AttrKey key) const;
  const OperandRoles& getRoles(AttrKey key) const;
  ShardingKind getSharding(AttrKey key) const;
  GemmOperand getOperand(AttrKey key) const;
  const QuantFormat& getFormat(AttrKey key) const;
  const std::vector<QuantFormat>& getFormats(AttrKey key) const;
  RopeRotation getRotation(AttrKey key) const;
  DeviceGroup getGroup(AttrKey key) const;
  Reduction getReduction(AttrKey key) const;
  std::vector<int64_t> getIntsOr(AttrKey key, std::vector<int64_t> fallback) const;
  std::string getStringOr(AttrKey key, std::string fallback) const;

  std::span<const std::pair<AttrKey, AttrValue>> entries() const { return entries_; }
  size_t hash() const;
  bool operator==(const Attrs& other) const = default;

 private:
  const AttrValue* find(AttrKey key) const;
  const AttrValue& get(AttrKey key, AttrKind kind) const;
  std::vector<std::pair<AttrKey, AttrValue>> entries_;
};

// Text form of one value, as the IR printer writes it: 3, 0.5, "text", [1,2], ["a","b"].
// Metadata and formats are written by name, like strings: "bwd_dgrad",
// ["gradient","weight"], "int8:channel:rtn".
std::string formatAttrValue(const AttrValue& value);

}  // namespace pgq
