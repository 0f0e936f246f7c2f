#include "support/escape.h"

#include <gtest/gtest.h>

#include <string>

namespace pgq {
namespace {

// Both styles escape quotes, backslashes, newlines and tabs alike; the other control
// characters as their readers expect.
TEST(Quoted, EachStyleEscapesControlCharactersForItsReader) {
  for (QuoteStyle style : {QuoteStyle::kJson, QuoteStyle::kIrText}) {
    EXPECT_EQ(quoted("layer0/attn/q", style), "\"layer0/attn/q\"");
    EXPECT_EQ(quoted("say \"int8\" \\ a\nb\tc", style), "\"say \\\"int8\\\" \\\\ a\\nb\\tc\"");
    EXPECT_EQ(quoted("\xc2\xb5s", style), "\"\xc2\xb5s\"");  // UTF-8 passes through
  }
  const std::string controls("\r\b\f\x01\x1f", 5);
  EXPECT_EQ(quoted(controls, QuoteStyle::kJson), "\"\\r\\b\\f\\u0001\\u001f\"");
  EXPECT_EQ(quoted(controls, QuoteStyle::kIrText), "\"\\x0d\\x08\\x0c\\x01\\x1f\"");
}

}  // namespace
}  // namespace pgq
