#pragma once
// Reading user-edited YAML files (model configs, policies, recipes, hardware models,
// profiles) with errors that name the file, the line, the field and what was
// expected: "small.yaml:4: field 'n_heads': expected an integer >= 1, got -2".
// Every reader also rejects keys it does not know, so a typo never goes unnoticed.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "support/file_io.h"

namespace pgq {

// The most YAML nodes a file may hold, bounded from above by counting the characters
// that start them (ConfigNode::loadString): ~2 GB of yaml-cpp's nodes, a profile of
// ~15,000 GEMMs.
inline constexpr size_t kMaxYamlNodes = 4'000'000;

class ConfigNode {
 public:
  // Parses a file (read as a file of `kind`, see support/file_io.h) / a string; a YAML
  // syntax error becomes a pgq::Error with its line.
  static ConfigNode loadFile(const std::string& path, InputKind kind);
  static ConfigNode loadString(const std::string& text, const std::string& name);

  ConfigNode(YAML::Node node, std::string file, std::string path)
      : node_(std::move(node)), file_(std::move(file)), path_(std::move(path)) {}

  const std::string& file() const { return file_; }
  const YAML::Node& yaml() const { return node_; }
  bool has(std::string_view key) const;

  // Throws unless this node is a map whose keys are all in `known`.
  void allowOnly(std::initializer_list<std::string_view> known) const;
  void allowOnly(const std::vector<std::string>& known) const;
  void requireMap() const;

  ConfigNode child(std::string_view key) const;             // required
  std::vector<ConfigNode> items() const;                    // this node as a sequence
  std::vector<std::pair<std::string, ConfigNode>> entries() const;  // this node as a map

  // Required fields.
  int64_t getInt(std::string_view key, int64_t min = INT64_MIN, int64_t max = INT64_MAX) const;
  double getDouble(std::string_view key, double min = -1e300, double max = 1e300) const;
  bool getBool(std::string_view key) const;
  std::string getString(std::string_view key) const;
  std::string getEnum(std::string_view key, std::initializer_list<std::string_view> choices) const;
  std::string getEnum(std::string_view key, std::span<const std::string_view> choices) const;
  // Optional fields: the fallback when the key is absent (still validated when present;
  // a key with no value, YAML null, is refused).
  int64_t getInt(std::string_view key, int64_t fallback, int64_t min, int64_t max) const;
  double getDouble(std::string_view key, double fallback, double min, double max) const;
  bool getBool(std::string_view key, bool fallback) const;
  std::string getString(std::string_view key, const std::string& fallback) const;
  std::string getEnum(std::string_view key, std::initializer_list<std::string_view> choices,
                      std::string_view fallback) const;

  // The name a field is given under: `key`, or `old_key` (its name in files written
  // before a rename) when only that is present. Both present is refused.
  std::string_view renamed(std::string_view key, std::string_view old_key) const;

  // This node itself as a scalar.
  std::string asString() const;
  int64_t asInt() const;

  // "FILE:LINE: field 'a.b': what" as a pgq::Error.
  [[noreturn]] void fail(std::string_view key, const std::string& what) const;
  [[noreturn]] void failHere(const std::string& what) const;

 private:
  YAML::Node at(std::string_view key) const;
  // Whether an optional field is given; one given with no value is refused.
  bool optional(std::string_view key) const;
  std::string fieldPath(std::string_view key) const;
  int lineOf(const YAML::Node& node) const;

  YAML::Node node_;
  std::string file_;
  std::string path_;
};


}  // namespace pgq
