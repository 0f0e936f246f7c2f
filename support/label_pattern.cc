#include "support/label_pattern.h"

#include <re2/re2.h>

#include <fmt/format.h>

#include "support/errors.h"

namespace pgq {

LabelPattern::LabelPattern(std::string pattern) : text_(std::move(pattern)) {
  if (text_.empty()) return;
  if (text_.size() > kMaxLength)
    throw Error(fmt::format("the pattern has {} characters, more than the {} a pattern may have", text_.size(),
                            kMaxLength));
  RE2::Options options;
  options.set_log_errors(false);  // the error goes into the pgq::Error, not to stderr
  // RE2's default budget (8 MiB), stated here because it is what bounds a pattern such
  // as (a{100}){100}: past it, RE2 refuses the pattern instead of growing.
  options.set_max_mem(int64_t{8} << 20);
  auto regex = std::make_shared<const RE2>(text_, options);
  if (!regex->ok()) throw Error(fmt::format("not a valid regular expression: {}", regex->error()));
  regex_ = std::move(regex);
}

bool LabelPattern::matches(std::string_view label) const {
  return !regex_ || RE2::FullMatch(re2::StringPiece(label.data(), label.size()), *regex_);
}

}  // namespace pgq
