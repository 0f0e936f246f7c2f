#include "ir/attr.h"

#include <algorithm>
#include <array>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/errors.h"
#include "support/escape.h"

namespace pgq {
namespace {

struct AttrInfo {
  std::string_view name;
  AttrKind kind;
};

constexpr std::array kAttrInfo = {
#define ATTR(id, text, kind) AttrInfo{text, AttrKind::k##kind},
#include "ir/attrs.def"
#undef ATTR
};

void hashCombine(size_t& seed, size_t value) {
  seed ^= value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
}

// Formats compare by their text form, so they hash it.
void hashValue(size_t& seed, const QuantFormat& format) {
  hashCombine(seed, std::hash<std::string>{}(format.toString()));
}

template <typename T>
void hashValue(size_t& seed, const T& value) {
  if constexpr (std::is_enum_v<T>) {
    hashCombine(seed, static_cast<size_t>(value));
  } else if constexpr (requires { value.begin(); } && !std::is_same_v<T, std::string>) {
    for (const auto& element : value) hashValue(seed, element);
  } else {
    hashCombine(seed, std::hash<T>{}(value));
  }
}

}  // namespace

std::string_view attrName(AttrKey key) { return kAttrInfo[static_cast<size_t>(key)].name; }

AttrKind attrKind(AttrKey key) { return kAttrInfo[static_cast<size_t>(key)].kind; }

std::string_view attrKindName(AttrKind kind) {
  switch (kind) {
    case AttrKind::kInt: return "integer";
    case AttrKind::kFloat: return "number";
    case AttrKind::kString: return "string";
    case AttrKind::kInts: return "list of integers";
    case AttrKind::kStrings: return "list of strings";
    case AttrKind::kDirection: return "GEMM direction";
    case AttrKind::kRoles: return "pair of operand roles";
    case AttrKind::kSharding: return "sharding kind";
    case AttrKind::kOperand: return "GEMM operand";
    case AttrKind::kFormat: return "quantization format";
    case AttrKind::kFormats: return "list of quantization formats";
    case AttrKind::kRotation: return "rope rotation";
    case AttrKind::kGroup: return "device group";
    case AttrKind::kReduction: return "reduction";
  }
  return "?";
}

std::optional<AttrKey> parseAttrKey(std::string_view text) {
  for (size_t i = 0; i < kAttrInfo.size(); ++i)
    if (kAttrInfo[i].name == text) return static_cast<AttrKey>(i);
  return std::nullopt;
}

AttrKind kindOf(const AttrValue& value) { return static_cast<AttrKind>(value.index()); }

void Attrs::set(AttrKey key, AttrValue value) {
  PGQ_ASSERT(kindOf(value) == attrKind(key), "attribute '{}' holds a {}, not a {}",
             attrName(key), attrKindName(attrKind(key)), attrKindName(kindOf(value)));
  if (const auto* format = std::get_if<QuantFormat>(&value)) format->validate();
  if (const auto* formats = std::get_if<std::vector<QuantFormat>>(&value))
    for (const QuantFormat& format : *formats) format.validate();
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const auto& entry, AttrKey k) { return entry.first < k; });
  if (it != entries_.end() && it->first == key)
    it->second = std::move(value);
  else
    entries_.insert(it, {key, std::move(value)});
}

void Attrs::erase(AttrKey key) {
  std::erase_if(entries_, [key](const auto& entry) { return entry.first == key; });
}

const AttrValue* Attrs::find(AttrKey key) const {
  for (const auto& [k, v] : entries_)
    if (k == key) return &v;
  return nullptr;
}

const AttrValue& Attrs::get(AttrKey key, AttrKind kind) const {
  PGQ_ASSERT(attrKind(key) == kind, "attribute '{}' is a {}, not a {}", attrName(key),
             attrKindName(attrKind(key)), attrKindName(kind));
  const AttrValue* value = find(key);
  PGQ_ASSERT(value != nullptr, "missing attribute '{}'", attrName(key));
  return *value;
}

int64_t Attrs::getInt(AttrKey key) const { return std::get<int64_t>(get(key, AttrKind::kInt)); }
double Attrs::getFloat(AttrKey key) const { return std::get<double>(get(key, AttrKind::kFloat)); }
const std::string& Attrs::getString(AttrKey key) const {
  return std::get<std::string>(get(key, AttrKind::kString));
}
const std::vector<int64_t>& Attrs::getInts(AttrKey key) const {
  return std::get<std::vector<int64_t>>(get(key, AttrKind::kInts));
}
const std::vector<std::string>& Attrs::getStrings(AttrKey key) const {
  return std::get<std::vector<std::string>>(get(key, AttrKind::kStrings));
}

GemmDirection Attrs::getDirection(AttrKey key) const {
  return std::get<GemmDirection>(get(key, AttrKind::kDirection));
}
const OperandRoles& Attrs::getRoles(AttrKey key) const {
  return std::get<OperandRoles>(get(key, AttrKind::kRoles));
}
ShardingKind Attrs::getSharding(AttrKey key) const {
  return std::get<ShardingKind>(get(key, AttrKind::kSharding));
}
GemmOperand Attrs::getOperand(AttrKey key) const {
  return std::get<GemmOperand>(get(key, AttrKind::kOperand));
}
const QuantFormat& Attrs::getFormat(AttrKey key) const {
  return std::get<QuantFormat>(get(key, AttrKind::kFormat));
}
const std::vector<QuantFormat>& Attrs::getFormats(AttrKey key) const {
  return std::get<std::vector<QuantFormat>>(get(key, AttrKind::kFormats));
}
RopeRotation Attrs::getRotation(AttrKey key) const {
  return std::get<RopeRotation>(get(key, AttrKind::kRotation));
}

DeviceGroup Attrs::getGroup(AttrKey key) const { return std::get<DeviceGroup>(get(key, AttrKind::kGroup)); }

Reduction Attrs::getReduction(AttrKey key) const { return std::get<Reduction>(get(key, AttrKind::kReduction)); }

std::vector<int64_t> Attrs::getIntsOr(AttrKey key, std::vector<int64_t> fallback) const {
  return has(key) ? getInts(key) : fallback;
}

std::string Attrs::getStringOr(AttrKey key, std::string fallback) const {
  return has(key) ? getString(key) : fallback;
}

size_t Attrs::hash() const {
  size_t seed = entries_.size();
  for (const auto& [key, value] : entries_) {
    hashCombine(seed, static_cast<size_t>(key));
    std::visit([&seed](const auto& v) { hashValue(seed, v); }, value);
  }
  return seed;
}

std::string formatAttrValue(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        auto list = [](const auto& items, auto text) {
          std::string out = "[";
          for (size_t i = 0; i < items.size(); ++i) {
            if (i) out += ",";
            out += quoted(text(items[i]), QuoteStyle::kIrText);
          }
          return out + "]";
        };
        if constexpr (std::is_same_v<T, int64_t>) {
          return fmt::format("{}", v);
        } else if constexpr (std::is_same_v<T, double>) {
          // fmt's shortest round-trip form: parsing it back gives the same double.
          // A value that happens to be integral keeps a ".0" so it reads as a number.
          std::string s = fmt::format("{}", v);
          if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
          return s;
        } else if constexpr (std::is_same_v<T, std::string>) {
          return quoted(v, QuoteStyle::kIrText);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          return fmt::format("[{}]", fmt::join(v, ","));
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          return list(v, [](const std::string& e) { return e; });
        } else if constexpr (std::is_same_v<T, OperandRoles>) {
          return list(v, [](OperandRole r) { return nameOf(r); });
        } else if constexpr (std::is_same_v<T, QuantFormat>) {
          return quoted(v.toString(), QuoteStyle::kIrText);
        } else if constexpr (std::is_same_v<T, std::vector<QuantFormat>>) {
          return list(v, [](const QuantFormat& f) { return f.toString(); });
        } else {
          return quoted(nameOf(v), QuoteStyle::kIrText);
        }
      },
      value);
}

}  // namespace pgq
