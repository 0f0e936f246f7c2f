#pragma once
// A regular expression a user writes over GEMM labels: a recipe entry's `match:` and a
// policy rule's `label:`. Compiled once, with RE2: matching takes time linear in the
// label and uses no recursion, so no pattern can overflow the stack or backtrack for
// ever the way the C++ standard library's engine does on `(.*)*(.*)*X`. The syntax is
// RE2's (Perl-like, without backreferences or lookaround); a pattern matches the whole
// label.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace re2 {
class RE2;
}

namespace pgq {

class LabelPattern {
 public:
  // Longer patterns are refused: nothing a label needs comes close, and the bound keeps
  // compile time and memory small whatever a file holds.
  static constexpr size_t kMaxLength = 1000;

  LabelPattern() = default;  // no pattern: empty(), matches every label

  // An empty `pattern` is no pattern. Throws pgq::Error for a pattern longer than
  // kMaxLength or one RE2 rejects (with RE2's reason); the message names neither file
  // nor field, which the caller adds.
  explicit LabelPattern(std::string pattern);

  bool empty() const { return text_.empty(); }
  const std::string& text() const { return text_; }
  // True when the pattern matches all of `label` (or there is no pattern).
  bool matches(std::string_view label) const;

 private:
  std::string text_;
  // Shared: a compiled RE2 cannot be copied, and recipes and policies are.
  std::shared_ptr<const re2::RE2> regex_;
};

}  // namespace pgq
