#include "ir/attr.h"

#include <algorithm>
#include <array>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/errors.h"

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
    std::visit(
        [&seed](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                        std::is_same_v<T, std::vector<std::string>>) {
            for (const auto& e : v) hashCombine(seed, std::hash<std::decay_t<decltype(e)>>{}(e));
          } else {
            hashCombine(seed, std::hash<T>{}(v));
          }
        },
        value);
  }
  return seed;
}

std::string quoteString(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

std::string formatAttrValue(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return fmt::format("{}", v);
        } else if constexpr (std::is_same_v<T, double>) {
          // fmt's shortest round-trip form: parsing it back gives the same double.
          // A value that happens to be integral keeps a ".0" so it reads as a number.
          std::string s = fmt::format("{}", v);
          if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
          return s;
        } else if constexpr (std::is_same_v<T, std::string>) {
          return quoteString(v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          return fmt::format("[{}]", fmt::join(v, ","));
        } else {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) {
            if (i) out += ",";
            out += quoteString(v[i]);
          }
          return out + "]";
        }
      },
      value);
}

}  // namespace pgq
