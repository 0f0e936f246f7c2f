#pragma once
// Two kinds of failure. `Error` is something a user can cause: a
// malformed file, a bad flag, an inconsistent config; its message names the file,
// the field and what was expected, and the CLI turns it into exit code 2.
// `InternalError` is a broken invariant inside pgq (a programmer error); it is thrown
// rather than aborting so that tests can observe it and the CLI can report it.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace pgq {

// A message echoes what a user gave (a field of a file, a flag's value): a NUL there
// ended what() at it (the rest of the message was lost), and other control characters
// (ESC) would act on the terminal. They are written as \xNN; newlines and tabs stay.
inline std::string printableMessage(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out;
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(printableMessage(message)) {}
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

}  // namespace pgq

// PGQ_ASSERT(cond, "format {}", args...): an invariant pgq itself must keep.
#define PGQ_ASSERT(cond, ...)                                                       \
  do {                                                                              \
    if (!(cond))                                                                    \
      throw ::pgq::InternalError(fmt::format("{}:{}: assertion '{}' failed: {}",   \
                                             __FILE__, __LINE__, #cond,             \
                                             fmt::format(__VA_ARGS__)));            \
  } while (0)
