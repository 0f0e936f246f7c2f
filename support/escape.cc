#include "support/escape.h"

#include <algorithm>
#include <array>
#include <cctype>

#include <fmt/format.h>

namespace pgq {

std::string quoted(std::string_view text, QuoteStyle style) {
  const bool json = style == QuoteStyle::kJson;
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += json ? "\\r" : "\\x0d"; break;
      case '\b': out += json ? "\\b" : "\\x08"; break;
      case '\f': out += json ? "\\f" : "\\x0c"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20)
          out += c;
        else if (json)
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        else
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    }
  }
  return out + "\"";
}

std::string yamlScalar(std::string_view text) {
  auto plainChar = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '/' || c == '+';
  };
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  constexpr std::array<std::string_view, 11> kSpecial{"null", "true", "false", "yes", "no", "on",
                                                       "off",  "y",    "n",     "-",   "..."};
  const bool plain = !text.empty() && text[0] != '-' && std::all_of(text.begin(), text.end(), plainChar) &&
                     std::find(kSpecial.begin(), kSpecial.end(), lower) == kSpecial.end();
  return plain ? std::string(text) : quoted(text, QuoteStyle::kJson);
}

std::string csvField(std::string_view text) {
  if (text.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string markdownCell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else if (isControlChar(c)) out += ' ';
    else out += c;
  }
  return out;
}

std::string markdownCode(std::string_view text) {
  size_t longest = 0, run = 0;
  std::string body;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
    body += isControlChar(c) ? ' ' : c;
  }
  const std::string fence(longest + 1, '`');
  // A reader strips one space from each end of a span that has one at both; a backtick
  // next to the fence would lengthen it.
  const bool pad = !body.empty() && (body.front() == '`' || body.back() == '`' ||
                                     (body.front() == ' ' && body.back() == ' '));
  return pad ? fence + " " + body + " " + fence : fence + body + fence;
}

}  // namespace pgq
