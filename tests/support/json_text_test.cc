#include "support/json_text.h"

#include <gtest/gtest.h>

namespace pgq {
namespace {

TEST(JsonString, QuotesAndEscapes) {
  EXPECT_EQ(jsonString("blocks.0/attn/q"), "\"blocks.0/attn/q\"");
  EXPECT_EQ(jsonString(""), "\"\"");
  EXPECT_EQ(jsonString("say \"int8\" \\ done"), "\"say \\\"int8\\\" \\\\ done\"");
  EXPECT_EQ(jsonString("a\nb\tc\rd"), "\"a\\nb\\tc\\rd\"");
  EXPECT_EQ(jsonString(std::string_view("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  // UTF-8 passes through unchanged.
  EXPECT_EQ(jsonString("\xc2\xb5s"), "\"\xc2\xb5s\"");
}

}  // namespace
}  // namespace pgq
