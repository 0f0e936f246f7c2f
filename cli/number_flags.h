#pragma once
// Every numeric flag of every subcommand is registered here, named after its range in
// the library's table (support/option_ranges.h): its --help shows the range, and its
// argument is parsed strictly (decimal, the whole argument, no silent saturation) and
// checked against the range while the command line is parsed, before any work. The
// library checks the same ranges again for callers that do not go through the CLI.
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <type_traits>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "support/errors.h"
#include "support/option_ranges.h"

namespace pgq::cli {

// `text` as a number in `range`; throws pgq::Error naming the flag, the range and the
// text ("--lr: expected a finite number in (0, 10], got 'nan'").
template <typename T>
T parseNumber(const OptionRange<T>& range, const std::string& text);

extern template int64_t parseNumber(const OptionRange<int64_t>&, const std::string&);
extern template double parseNumber(const OptionRange<double>&, const std::string&);

// For a flag naming a file or folder to write: an empty argument (`-o ''`, an unset shell
// variable) is refused while parsing, not taken as the flag left out.
inline const CLI::Validator kNonEmptyPath(
    [](std::string& text) { return text.empty() ? std::string("an empty path; give a path or leave the flag out") : ""; },
    "PATH");

// A flag whose `value` holds its default, shown in the help after the range.
template <typename V, typename T>
CLI::Option* addNumber(CLI::App* cmd, const OptionRange<T>& range, V& value, const std::string& description) {
  return cmd
      ->add_option_function<std::string>(
          std::string(range.name),
          [&value, range](const std::string& text) { value = static_cast<V>(parseNumber(range, text)); },
          fmt::format("{}; in {}, default {}", description, range.text(), value))
      ->type_name(std::is_floating_point_v<T> ? "FLOAT" : "INT");
}

// For a comma-separated list: an empty argument is refused, not taken as the flag left
// out (which gives the default list) nor as an empty list.
inline const CLI::Validator kNonEmptyList(
    [](std::string& text) { return text.empty() ? std::string("an empty list; give items or leave the flag out") : ""; },
    "LIST");

// The items of a comma-separated list flag. An empty item ("int8,,fp8", "0.5,") is
// refused: CLI11's own splitting dropped it, and std::getline a trailing one.
inline std::vector<std::string> listItems(std::string_view flag, const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (items.back().empty())
      throw pgq::Error(fmt::format("{}: item {} of '{}' is empty; give items separated by single commas", flag,
                              items.size(), text));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

// A flag with no default value: `description` says what leaving it out means.
template <typename V, typename T>
CLI::Option* addNumber(CLI::App* cmd, const OptionRange<T>& range, std::optional<V>& value,
                       const std::string& description) {
  return cmd
      ->add_option_function<std::string>(
          std::string(range.name),
          [&value, range](const std::string& text) { value = static_cast<V>(parseNumber(range, text)); },
          fmt::format("{}; in {}", description, range.text()))
      ->type_name(std::is_floating_point_v<T> ? "FLOAT" : "INT");
}

// --threads: OpenMP threads for the command, set while parsing (0 leaves OpenMP's
// default).
void addThreadsFlag(CLI::App* cmd);

}  // namespace pgq::cli
