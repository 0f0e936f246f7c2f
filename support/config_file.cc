#include "support/config_file.h"

#include <algorithm>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/depthguard.h>

#include "support/errors.h"
#include "support/file_io.h"

namespace pgq {

ConfigNode ConfigNode::loadFile(const std::string& path, InputKind kind) {
  return loadString(readTextFile(path, kind), path);
}

ConfigNode ConfigNode::loadString(const std::string& text, const std::string& name) {
  if (text.find('\0') != std::string::npos)
    throw Error(fmt::format("{}: contains NUL bytes; expected a YAML text file", name));
  // yaml-cpp holds each node in ~0.5-1 KB: a 30 MB file of `[[],[],...]` took 7.3 GB and
  // a 60 MB one ran out of memory, before any field was checked. Every node but the
  // first follows one of these characters, so their count bounds the nodes: a profile of
  // 100 GEMMs has ~34,000, a model config a few dozen.
  size_t marks = 0;
  for (char c : text) marks += c == ',' || c == ':' || c == '[' || c == '{' || c == '\n' || c == '-';
  if (marks > kMaxYamlNodes)
    throw Error(fmt::format("{}: too large to read: {} YAML nodes or more (its ',', ':', '[', '{{', '-' and lines), "
                            "at most {}; pgq's files hold a few hundred per GEMM",
                            name, marks, kMaxYamlNodes));
  try {
    YAML::Node node = YAML::Load(text);
    if (!node.IsDefined() || node.IsNull()) throw Error(fmt::format("{}: is empty", name));
    return ConfigNode(node, name, "");
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp says only "bad file" here.
    throw Error(fmt::format("{}:{}:{}: nested too deeply for the YAML parser (its limit is 2000 levels of its own, a "
                            "few hundred of the file's); pgq's files nest a few levels",
                            name, e.mark.line + 1, e.mark.column + 1));
  } catch (const YAML::Exception& e) {
    throw Error(fmt::format("{}:{}:{}: YAML syntax error: {}", name, e.mark.line + 1,
                            e.mark.column + 1, e.msg));
  }
}

int ConfigNode::lineOf(const YAML::Node& node) const {
  return node.IsDefined() && node.Mark().line >= 0 ? node.Mark().line + 1 : 0;
}

std::string ConfigNode::fieldPath(std::string_view key) const {
  if (path_.empty()) return std::string(key);
  if (key.empty()) return path_;
  return fmt::format("{}.{}", path_, key);
}

void ConfigNode::fail(std::string_view key, const std::string& what) const {
  int line = 0;
  if (!key.empty() && node_.IsMap() && node_[std::string(key)]) line = lineOf(node_[std::string(key)]);
  if (line == 0) line = lineOf(node_);
  std::string where = line ? fmt::format("{}:{}", file_, line) : file_;
  std::string field = fieldPath(key);
  if (field.empty()) throw Error(fmt::format("{}: {}", where, what));
  throw Error(fmt::format("{}: field '{}': {}", where, field, what));
}

void ConfigNode::failHere(const std::string& what) const { fail("", what); }

void ConfigNode::requireMap() const {
  if (!node_.IsMap()) failHere("expected a mapping of 'key: value' lines");
}

bool ConfigNode::optional(std::string_view key) const {
  // `vocab:` with nothing after it is YAML's null: taken as absent, it would give the
  // default without a word where the user meant to write a value.
  if (!node_.IsMap()) return false;
  const YAML::Node value = node_[std::string(key)];
  if (!value.IsDefined() || !value.IsNull()) return value.IsDefined();
  for (const auto& entry : node_) {
    if (!entry.first.IsScalar() || entry.first.Scalar() != key || !entry.second.IsNull()) continue;
    // The key's line: an empty value's mark is where the next token starts.
    const int line = lineOf(entry.first);
    throw Error(fmt::format("{}{}: field '{}': has no value; give one, or remove the line for the default", file_,
                            line ? fmt::format(":{}", line) : "", fieldPath(key)));
  }
  return has(key);
}

bool ConfigNode::has(std::string_view key) const {
  return node_.IsMap() && node_[std::string(key)].IsDefined() && !node_[std::string(key)].IsNull();
}

YAML::Node ConfigNode::at(std::string_view key) const {
  requireMap();
  YAML::Node value = node_[std::string(key)];
  if (!value.IsDefined() || value.IsNull()) fail(key, "is missing");
  return value;
}

void ConfigNode::allowOnly(std::initializer_list<std::string_view> known) const {
  allowOnly(std::vector<std::string>(known.begin(), known.end()));
}

void ConfigNode::allowOnly(const std::vector<std::string>& known) const {
  requireMap();
  std::vector<std::string> seen;
  for (const auto& entry : node_) {
    if (!entry.first.IsScalar()) failHere("has a key that is not a plain name");
    std::string key = entry.first.as<std::string>();
    // yaml-cpp keeps the first of two equal keys silently; a user editing a file
    // would not expect the second line to be ignored.
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      int line = lineOf(entry.first);
      throw Error(fmt::format("{}{}: field '{}' is given twice", file_,
                              line ? fmt::format(":{}", line) : "", fieldPath(key)));
    }
    seen.push_back(key);
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      int line = lineOf(entry.first);
      throw Error(fmt::format("{}{}: unknown field '{}' (known fields: {})", file_,
                              line ? fmt::format(":{}", line) : "", fieldPath(key),
                              fmt::join(known, ", ")));
    }
  }
}

ConfigNode ConfigNode::child(std::string_view key) const {
  return ConfigNode(at(key), file_, fieldPath(key));
}

std::vector<ConfigNode> ConfigNode::items() const {
  if (!node_.IsSequence()) failHere("expected a list");
  std::vector<ConfigNode> out;
  for (size_t i = 0; i < node_.size(); ++i)
    out.emplace_back(node_[i], file_, fmt::format("{}[{}]", path_, i));
  return out;
}

std::vector<std::pair<std::string, ConfigNode>> ConfigNode::entries() const {
  requireMap();
  std::vector<std::pair<std::string, ConfigNode>> out;
  for (const auto& entry : node_) {
    std::string key = entry.first.as<std::string>();
    out.emplace_back(key, ConfigNode(entry.second, file_, fieldPath(key)));
  }
  return out;
}

namespace {

template <typename T>
bool convert(const YAML::Node& node, T& out) {
  if (!node.IsScalar()) return false;
  try {
    out = node.as<T>();
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}

std::string describeRange(double min, double max) {
  if (min > -1e300 && max < 1e300) return fmt::format(" in [{}, {}]", min, max);
  if (min > -1e300) return fmt::format(" >= {}", min);
  if (max < 1e300) return fmt::format(" <= {}", max);
  return "";
}

std::string scalarText(const YAML::Node& node) {
  if (node.IsScalar()) return fmt::format("'{}'", node.Scalar());
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "nothing";
}

}  // namespace

int64_t ConfigNode::getInt(std::string_view key, int64_t min, int64_t max) const {
  YAML::Node value = at(key);
  std::string range;
  if (min != INT64_MIN && max != INT64_MAX) range = fmt::format(" in [{}, {}]", min, max);
  else if (min != INT64_MIN) range = fmt::format(" >= {}", min);
  else if (max != INT64_MAX) range = fmt::format(" <= {}", max);
  int64_t out = 0;
  // yaml-cpp reads 010 as octal 8 (YAML 1.1), YAML 1.2 as 10: a leading zero is refused
  // rather than read one way silently (the command line refuses it too).
  if (value.IsScalar()) {
    std::string_view digits = value.Scalar();
    if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) digits.remove_prefix(1);
    if (digits.size() > 1 && digits[0] == '0' &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      fail(key, fmt::format("'{}' has a leading zero, which YAML readers take as octal or decimal; write it without",
                            value.Scalar()));
  }
  if (!convert(value, out)) fail(key, fmt::format("expected an integer{}, got {}", range, scalarText(value)));
  if (out < min || out > max) fail(key, fmt::format("expected an integer{}, got {}", range, out));
  return out;
}

double ConfigNode::getDouble(std::string_view key, double min, double max) const {
  YAML::Node value = at(key);
  double out = 0;
  if (!convert(value, out) || !std::isfinite(out))
    fail(key, fmt::format("expected a number{}, got {}", describeRange(min, max), scalarText(value)));
  // Out of range: both bounds, the +-1e300 that stand for "none" included (a field >= 1
  // still stops at 1e300).
  if (out < min || out > max) fail(key, fmt::format("expected a number in [{}, {}], got {}", min, max, out));
  return out;
}

bool ConfigNode::getBool(std::string_view key) const {
  YAML::Node value = at(key);
  bool out = false;
  if (!convert(value, out)) fail(key, fmt::format("expected true or false, got {}", scalarText(value)));
  return out;
}

std::string ConfigNode::getString(std::string_view key) const {
  YAML::Node value = at(key);
  if (!value.IsScalar()) fail(key, fmt::format("expected a string, got {}", scalarText(value)));
  return value.Scalar();
}

std::string ConfigNode::getEnum(std::string_view key,
                                std::initializer_list<std::string_view> choices) const {
  return getEnum(key, std::span<const std::string_view>(choices.begin(), choices.size()));
}

std::string ConfigNode::getEnum(std::string_view key, std::span<const std::string_view> choices) const {
  std::string value = getString(key);
  for (std::string_view c : choices)
    if (c == value) return value;
  fail(key, fmt::format("expected one of {}, got '{}'", fmt::join(choices, ", "), value));
}

int64_t ConfigNode::getInt(std::string_view key, int64_t fallback, int64_t min, int64_t max) const {
  return optional(key) ? getInt(key, min, max) : fallback;
}

double ConfigNode::getDouble(std::string_view key, double fallback, double min, double max) const {
  return optional(key) ? getDouble(key, min, max) : fallback;
}

bool ConfigNode::getBool(std::string_view key, bool fallback) const {
  return optional(key) ? getBool(key) : fallback;
}

std::string ConfigNode::getString(std::string_view key, const std::string& fallback) const {
  return optional(key) ? getString(key) : fallback;
}

std::string ConfigNode::getEnum(std::string_view key, std::initializer_list<std::string_view> choices,
                                std::string_view fallback) const {
  return optional(key) ? getEnum(key, choices) : std::string(fallback);
}

std::string_view ConfigNode::renamed(std::string_view key, std::string_view old_key) const {
  if (!node_.IsMap() || !node_[std::string(old_key)].IsDefined()) return key;
  if (node_[std::string(key)].IsDefined())
    fail(old_key, fmt::format("is the old name of '{}'; give one of them", fieldPath(key)));
  return old_key;
}

std::string ConfigNode::asString() const {
  if (!node_.IsScalar()) failHere(fmt::format("expected a string, got {}", scalarText(node_)));
  return node_.Scalar();
}

int64_t ConfigNode::asInt() const {
  int64_t out = 0;
  if (!convert(node_, out)) failHere(fmt::format("expected an integer, got {}", scalarText(node_)));
  return out;
}

}  // namespace pgq
