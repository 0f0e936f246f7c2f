#pragma once
// Pieces of JSON text for the files pgq writes by hand with fmt (SQNR tables, the
// PyTorch recipe export): pgq reads no JSON, so it needs no JSON library.
#include <string>
#include <string_view>

namespace pgq {

// `text` as a JSON string literal: quotes, with `"`, `\` and the control characters
// escaped (\n, \t, \r, \b, \f, \u00XX for the others). Other bytes are copied as they
// are, so UTF-8 stays UTF-8. The result is also a valid Python 3 string literal
// (support/escape.h, QuoteStyle::kJson).
std::string jsonString(std::string_view text);

}  // namespace pgq
