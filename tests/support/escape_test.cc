#include "support/escape.h"
#include "support/errors.h"

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

// A CSV field is quoted only where a reader would split it otherwise, with RFC 4180's
// doubled quotes: module paths such as ModuleDict keys and ONNX node names may hold
// commas, quotes and newlines.
TEST(CsvField, QuotesOnlyWhatAReaderWouldSplit) {
  EXPECT_EQ(csvField("model.layers.0.self_attn.q_proj:dgrad"), "model.layers.0.self_attn.q_proj:dgrad");
  EXPECT_EQ(csvField("e4m3:block32:rtn:scale=e8m0"), "e4m3:block32:rtn:scale=e8m0");
  EXPECT_EQ(csvField(""), "");
  EXPECT_EQ(csvField("heads.a,b"), "\"heads.a,b\"");
  EXPECT_EQ(csvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csvField("a\nb"), "\"a\nb\"");
  EXPECT_EQ(csvField("a\rb"), "\"a\rb\"");
  EXPECT_EQ(csvField("tab\tand \\ stay"), "tab\tand \\ stay");
}

// A label in a markdown table stays in its cell and its row (a '|' added a column, a
// newline split the row: session 16).
TEST(MarkdownCell, EscapesWhatWouldLeaveTheCell) {
  EXPECT_EQ(markdownCell("layer0/attn/q:dgrad"), "layer0/attn/q:dgrad");
  EXPECT_EQ(markdownCell("a|b\nc\td"), "a\\|b c d");
}

// A name in the report's prose is one code span whatever it holds: a backtick in it
// ended the span, and the rest of the line was read as markdown.
TEST(MarkdownCode, IsOneCodeSpanWhateverTheTextHolds) {
  EXPECT_EQ(markdownCode("F+B_SR>100"), "`F+B_SR>100`");
  EXPECT_EQ(markdownCode("a`b"), "``a`b``");
  EXPECT_EQ(markdownCode("x``y`"), "``` x``y` ```");
  EXPECT_EQ(markdownCode("`start"), "`` `start ``");
  EXPECT_EQ(markdownCode(" both "), "`  both  `");
  EXPECT_EQ(markdownCode("line\nbreak|pipe"), "`line break|pipe`");
  EXPECT_EQ(markdownCell(markdownCode("a|b")), "`a\\|b`");
}

// An error message echoing a user's bytes keeps everything after a NUL (what() ended
// there: "got '32" for "32\x0068") and shows control characters instead of sending them
// to the terminal.
TEST(ErrorMessage, ControlCharactersArePrintedNotPassedOn) {
  const Error e(std::string("field 'k': got '32") + '\0' + "68'\n\tnext line, \x1b[31mred\x7f");
  EXPECT_EQ(std::string(e.what()), "field 'k': got '32\\x0068'\n\tnext line, \\x1b[31mred\\x7f");
}

}  // namespace
}  // namespace pgq
