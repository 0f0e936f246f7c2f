#include "support/escape.h"

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

}  // namespace pgq
