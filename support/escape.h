#pragma once
// The one string escaper of the text pgq writes by hand: the IR text form, JSON
// (support/json_text.h), YAML scalars and CSV fields. Both escape `"`, `\`, newline and tab alike; they differ in the
// other control characters, each written as the reader of its text expects.
#include <string>
#include <string_view>

namespace pgq {

// An ASCII control character (below 0x20, or DEL): what the escapers below replace.
constexpr bool isControlChar(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }

enum class QuoteStyle {
  // JSON, also a valid Python 3 string literal: \r, \b, \f, and \u00XX for the other
  // control characters.
  kJson,
  // The IR text form: \xXX (two lowercase hex digits) for every other control
  // character, the only other escape ir/parser.cc reads back.
  kIrText,
};

// `text` in double quotes, with `"`, `\`, newline (\n), tab (\t) and the other control
// characters escaped as `style` writes them. Other bytes are copied as they are, so
// UTF-8 stays UTF-8.
std::string quoted(std::string_view text, QuoteStyle style);

// `text` as a YAML scalar that reads back as the same string: as it is where it is a
// plain word or path (letters, digits, '_', '.', '-', '/', '+'; not a word YAML reads as
// null or a boolean), so that the configs pgq wrote before read the same; else in double
// quotes with JSON's escapes, which YAML's double-quoted style shares.
std::string yamlScalar(std::string_view text);

// `text` as one CSV field (RFC 4180): as it is unless it holds a comma, a double quote,
// a newline or a carriage return, else in double quotes with each `"` doubled. Labels
// come from the user's module paths and ONNX node names, which may hold any of them.
std::string csvField(std::string_view text);

// `text` as the content of a markdown table cell: `|` escaped as `\|` and line breaks and
// other control characters as spaces, so that a label holding them stays in its cell and
// its row.
std::string markdownCell(std::string_view text);

// `text` as an inline code span in markdown prose (CommonMark): fenced by one backtick more
// than its longest run of backticks, padded by a space where it begins or ends with one
// (or with a space), control characters as spaces. "`" + name + "`" let a name holding a
// backtick end the span and format the rest of the line. In a table cell, pass the result
// through markdownCell as well.
std::string markdownCode(std::string_view text);

}  // namespace pgq
