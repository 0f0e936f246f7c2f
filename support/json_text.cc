#include "support/json_text.h"

#include "support/escape.h"

namespace pgq {

std::string jsonString(std::string_view text) { return quoted(text, QuoteStyle::kJson); }

}  // namespace pgq
