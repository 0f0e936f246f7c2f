#include "passes/pass_options.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/errors.h"
#include "support/quant_format.h"

namespace pgq {
namespace {

std::string_view trimmed(std::string_view text) {
  size_t begin = text.find_first_not_of(' ');
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(' ') - begin + 1);
}

}  // namespace

std::vector<std::string_view> splitOutsideBrackets(std::string_view text, std::string_view what) {
  std::vector<std::string_view> parts;
  std::vector<char> open;  // the closing brackets still expected, innermost last
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '{' || c == '[') {
      open.push_back(c == '{' ? '}' : ']');
    } else if (c == '}' || c == ']') {
      if (open.empty() || open.back() != c)
        throw Error(fmt::format("{} '{}': unexpected '{}' at character {}", what, text, c, i + 1));
      open.pop_back();
    } else if (c == ',' && open.empty()) {
      parts.push_back(trimmed(text.substr(start, i - start)));
      start = i + 1;
    }
  }
  if (!open.empty()) throw Error(fmt::format("{} '{}': missing '{}' at the end", what, text, open.back()));
  parts.push_back(trimmed(text.substr(start)));
  return parts;
}

PassSpec parsePassSpec(std::string_view text) {
  text = trimmed(text);
  PassSpec spec;
  size_t brace = text.find('{');
  spec.name = std::string(trimmed(text.substr(0, brace)));
  if (spec.name.empty()) throw Error(fmt::format("pass '{}': empty pass name", text));
  if (brace == std::string_view::npos) {
    splitOutsideBrackets(text, "pass");  // a stray '}' or ']'
    return spec;
  }
  if (text.back() != '}')
    throw Error(fmt::format("pass '{}': the options must end the pass, in '{{...}}'", text));
  std::string_view body = text.substr(brace + 1, text.size() - brace - 2);
  if (body.find_first_of("{}") != std::string_view::npos)
    throw Error(fmt::format("pass '{}': options cannot contain braces", text));
  if (trimmed(body).empty()) return spec;  // name{}: no options
  for (std::string_view item : splitOutsideBrackets(body, fmt::format("options of pass {}", spec.name))) {
    if (item.empty()) throw Error(fmt::format("pass '{}': empty option (expected key=value)", text));
    size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      throw Error(fmt::format("pass '{}': option '{}' has no value (expected {}=value)", text, item, item));
    std::string_view key = trimmed(item.substr(0, eq));
    if (key.empty()) throw Error(fmt::format("pass '{}': option '{}' has no key (expected key=value)", text, item));
    spec.options.push_back({std::string(key), std::string(trimmed(item.substr(eq + 1)))});
  }
  return spec;
}

namespace option_detail {
namespace {

std::string known(const KeyTable& table) {
  if (table.keys.empty()) return fmt::format("{} takes no options", table.pass);
  return fmt::format("options of {}: {}", table.pass, fmt::join(table.keys, ", "));
}

[[noreturn]] void fail(const Where& where, const std::string& problem) {
  throw Error(fmt::format("pass '{}': option '{}': {} ({})", where.table.pass, where.key, problem,
                          known(where.table)));
}

}  // namespace

void checkKeys(const PassSpec& spec, const KeyTable& table) {
  for (size_t i = 0; i < spec.options.size(); ++i) {
    const std::string& key = spec.options[i].key;
    if (std::find(table.keys.begin(), table.keys.end(), key) == table.keys.end())
      throw Error(fmt::format("pass '{}': unknown option '{}' ({})", spec.name, key, known(table)));
    for (size_t j = 0; j < i; ++j)
      if (spec.options[j].key == key)
        throw Error(fmt::format("pass '{}': option '{}' given twice ({})", spec.name, key, known(table)));
  }
  for (size_t k = 0; k < table.keys.size(); ++k) {
    if (!table.required[k]) continue;
    bool given = std::any_of(spec.options.begin(), spec.options.end(),
                             [&](const OptionText& o) { return o.key == table.keys[k]; });
    if (!given)
      throw Error(fmt::format("pass '{}': missing required option '{}' ({})", spec.name, table.keys[k], known(table)));
  }
}

void parseValue(const Where& where, std::string_view text, bool& out) {
  if (text == "true") {
    out = true;
  } else if (text == "false") {
    out = false;
  } else {
    fail(where, fmt::format("expected true or false, got '{}'", text));
  }
}

void parseValue(const Where& where, std::string_view text, int64_t& out) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    fail(where, fmt::format("expected a 64-bit integer, got '{}'", text));
  if (value < where.min) fail(where, fmt::format("expected an integer >= {}, got {}", where.min, value));
  out = value;
}

// One format of a list item, or a message naming the key and the item.
QuantFormat formatOf(const Where& where, std::string_view format, std::string_view item) {
  try {
    return QuantFormat::parse(format);
  } catch (const Error& e) {
    fail(where, format == item ? fmt::format("format '{}': {}", format, e.what())
                               : fmt::format("format '{}' in '{}': {}", format, item, e.what()));
  }
}

void parseValue(const Where& where, std::string_view text, std::vector<QuantFormat>& out) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']')
    fail(where, fmt::format("expected a list of formats in brackets like [int8:channel:rtn,int7:channel:sr], got '{}'",
                            text));
  std::string_view body = trimmed(text.substr(1, text.size() - 2));
  if (body.empty()) fail(where, "expected at least one format, got []");
  std::vector<QuantFormat> formats;
  for (std::string_view item : splitOutsideBrackets(body, "list")) {
    QuantFormat format = formatOf(where, item, item);
    if (std::find(formats.begin(), formats.end(), format) != formats.end())
      fail(where, fmt::format("format '{}' listed twice", item));
    formats.push_back(format);
  }
  out = std::move(formats);
}

void parseValue(const Where& where, std::string_view text, std::vector<FormatPair>& out) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']')
    fail(where, fmt::format("expected a list of format pairs in brackets like "
                            "[int8:channel:rtn/int8:channel:sr], got '{}'",
                            text));
  std::string_view body = trimmed(text.substr(1, text.size() - 2));
  std::vector<FormatPair> pairs;  // [] is none
  for (std::string_view item : body.empty() ? std::vector<std::string_view>{} : splitOutsideBrackets(body, "list")) {
    const size_t slash = item.find('/');
    if (slash == std::string_view::npos || item.find('/', slash + 1) != std::string_view::npos)
      fail(where, fmt::format("expected operand_format/gradient_format, got '{}'", item));
    FormatPair pair{formatOf(where, trimmed(item.substr(0, slash)), item),
                    formatOf(where, trimmed(item.substr(slash + 1)), item)};
    if (std::find(pairs.begin(), pairs.end(), pair) != pairs.end())
      fail(where, fmt::format("format pair '{}' listed twice", item));
    pairs.push_back(std::move(pair));
  }
  out = std::move(pairs);
}

void parseValue(const Where& where, std::string_view text, std::optional<Recipe>& out) {
  if (text.empty()) fail(where, "expected a recipe file, got nothing");
  try {
    out = loadRecipe(std::string(text));
  } catch (const Error& e) {
    fail(where, e.what());
  }
}

void parseValue(const Where& where, std::string_view text, std::optional<HardwareModel>& out) {
  if (text.empty()) fail(where, "expected a hardware preset or file, got nothing");
  try {
    out = loadHardwareModel(std::string(text));
  } catch (const Error& e) {
    fail(where, e.what());
  }
}

std::string syntaxOf(const bool&) { return "true|false"; }
std::string syntaxOf(const int64_t&) { return "<int>"; }
std::string syntaxOf(const std::vector<QuantFormat>&) { return "[<format>,...]"; }
std::string syntaxOf(const std::vector<FormatPair>&) { return "[<format>/<gradient format>,...]"; }
std::string syntaxOf(const std::optional<Recipe>&) { return "<recipe.yaml>"; }
std::string syntaxOf(const std::optional<HardwareModel>&) { return "<preset|hardware.yaml>"; }

std::string textOf(const bool& value) { return value ? "true" : "false"; }
std::string textOf(const int64_t& value) { return std::to_string(value); }
std::string textOf(const std::vector<QuantFormat>& value) {
  std::vector<std::string> items;
  for (const QuantFormat& f : value) items.push_back(f.toString());
  return fmt::format("[{}]", fmt::join(items, ","));
}
std::string textOf(const std::vector<FormatPair>& value) {
  std::vector<std::string> items;
  for (const FormatPair& p : value) items.push_back(p.operand.toString() + "/" + p.gradient.toString());
  return fmt::format("[{}]", fmt::join(items, ","));
}
std::string textOf(const std::optional<Recipe>& value) { return value ? value->source : "none"; }
std::string textOf(const std::optional<HardwareModel>& value) { return value ? value->name : "none"; }

}  // namespace option_detail
}  // namespace pgq
