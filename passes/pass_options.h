#pragma once
// Pass options as text, the way MLIR writes them in a pipeline:
//
//   quantize_gemms{recipe=r.yaml,seed=3}
//   instrument_stats{formats=[int8:channel:rtn,int4:tensor:rtn],outputs=true}
//
// A pass with options keeps them in an options struct, whose member initializers are
// the defaults, and declares next to its class a table (`kOptions`) that binds each
// key to a member, with a line of help. The registry parses `{...}` against that
// table, so a pass only ever receives known, well-formed options, and a user gets one
// pgq::Error naming the pass, the key and the known keys for an unknown or repeated
// key, a malformed value or a missing required option.
//
// A value's syntax follows the type of the member it sets:
//   bool                          true | false
//   int64_t                       a decimal integer (at least the option's `min`)
//   std::vector<QuantFormat>      quantization formats in brackets, [int8:channel:rtn,int7:channel:sr]
//                                 (support/quant_format.h; ':' belongs to a format)
//   std::vector<FormatPair>       pairs of formats (plan/profile_request.h) in brackets, each `operand/gradient`:
//                                 [int7:channel:rtn/int7:channel:sr,e4m3:tensor:rtn/e5m2:tensor:sr]
//                                 ([] for none)
//   std::optional<Recipe>         a recipe YAML file, read by loadRecipe (plan/recipe.h)
//   std::optional<HardwareModel>  a hardware preset name or YAML file, read by
//                                 loadHardwareModel (plan/hardware.h)
// Outside a list's brackets a value cannot contain ',', '{', '}', '[' or ']'; spaces
// around names, keys and values are ignored.
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "plan/hardware.h"
#include "plan/profile_request.h"
#include "plan/recipe.h"
#include "support/quant_format.h"

namespace pgq {

// One `key=value` of a pass spec, as written.
struct OptionText {
  std::string key;
  std::string value;
};

// A pass spec split into its name and its options, values not yet parsed.
struct PassSpec {
  std::string name;
  std::vector<OptionText> options;
};

// Parses "name" or "name{key=value,...}". Throws pgq::Error, quoting `text`, for
// unbalanced braces or brackets, an empty name or key, or an option without '='.
PassSpec parsePassSpec(std::string_view text);

// Splits `text` at the commas outside braces and brackets ("a,b{c=1,d=[x,y]}" ->
// "a", "b{c=1,d=[x,y]}"), each part trimmed of spaces. Throws pgq::Error, naming
// `what` and quoting `text`, for unbalanced braces or brackets.
std::vector<std::string_view> splitOutsideBrackets(std::string_view text, std::string_view what);

// One option a pass declares: its key, the member of the pass's options struct that
// holds it, help, and whether it must be given (a required option has no default).
template <class Options>
struct PassOption {
  using Member = std::variant<bool Options::*, int64_t Options::*, std::vector<QuantFormat> Options::*,
                              std::vector<FormatPair> Options::*, std::optional<Recipe> Options::*,
                              std::optional<HardwareModel> Options::*>;
  std::string_view key;
  Member member;
  std::string_view help;
  bool required = false;
  int64_t min = std::numeric_limits<int64_t>::min();  // for integers
};

// An option as `pgq ir opt --help` shows it.
struct OptionHelp {
  std::string key;
  std::string syntax;         // "<int>", "[<format>,...]", "<preset|hardware.yaml>", ...
  std::string default_value;  // empty for a required option
  std::string help;
  bool required = false;
};

namespace option_detail {

// The declared options of one pass, for checking keys and naming them in messages.
struct KeyTable {
  std::string_view pass;
  std::vector<std::string_view> keys;
  std::vector<bool> required;
};

// Throws pgq::Error for a key of `spec` that is not in `table`, a key given twice, or
// a required key not given.
void checkKeys(const PassSpec& spec, const KeyTable& table);

// Where a value comes from, for messages.
struct Where {
  const KeyTable& table;
  std::string_view key;
  int64_t min;
};

// Parse `text` into `out`, or throw pgq::Error naming the pass, the key and the known keys.
void parseValue(const Where& where, std::string_view text, bool& out);
void parseValue(const Where& where, std::string_view text, int64_t& out);
void parseValue(const Where& where, std::string_view text, std::vector<QuantFormat>& out);
void parseValue(const Where& where, std::string_view text, std::vector<FormatPair>& out);
void parseValue(const Where& where, std::string_view text, std::optional<Recipe>& out);
void parseValue(const Where& where, std::string_view text, std::optional<HardwareModel>& out);

// The syntax of a value of the member's type, and a value in that syntax.
std::string syntaxOf(const bool&);
std::string syntaxOf(const int64_t&);
std::string syntaxOf(const std::vector<QuantFormat>&);
std::string syntaxOf(const std::vector<FormatPair>&);
std::string syntaxOf(const std::optional<Recipe>&);
std::string syntaxOf(const std::optional<HardwareModel>&);
std::string textOf(const bool& value);
std::string textOf(const int64_t& value);
std::string textOf(const std::vector<QuantFormat>& value);
std::string textOf(const std::vector<FormatPair>& value);
std::string textOf(const std::optional<Recipe>& value);
std::string textOf(const std::optional<HardwareModel>& value);

template <class Options>
KeyTable keyTable(std::string_view pass, std::span<const PassOption<Options>> options) {
  KeyTable table{pass, {}, {}};
  for (const PassOption<Options>& option : options) {
    table.keys.push_back(option.key);
    table.required.push_back(option.required);
  }
  return table;
}

}  // namespace option_detail

// The options `spec` gives a pass that declares `options`; the rest keep the
// defaults of `Options`. Throws pgq::Error as described at the top of this file.
template <class Options>
Options parsePassOptions(const PassSpec& spec, std::span<const PassOption<Options>> options) {
  option_detail::KeyTable table = option_detail::keyTable(spec.name, options);
  option_detail::checkKeys(spec, table);
  Options parsed;
  for (const OptionText& given : spec.options)
    for (const PassOption<Options>& option : options)
      if (option.key == given.key)
        std::visit([&](auto member) { option_detail::parseValue({table, option.key, option.min}, given.value,
                                                                parsed.*member); },
                   option.member);
  return parsed;
}

// What `pgq ir opt --help` lists for a pass that declares `options`.
template <class Options>
std::vector<OptionHelp> describePassOptions(std::span<const PassOption<Options>> options) {
  const Options defaults;
  std::vector<OptionHelp> described;
  for (const PassOption<Options>& option : options)
    std::visit(
        [&](auto member) {
          const auto& value = defaults.*member;
          described.push_back({std::string(option.key), option_detail::syntaxOf(value),
                               option.required ? std::string() : option_detail::textOf(value),
                               std::string(option.help), option.required});
        },
        option.member);
  return described;
}

}  // namespace pgq
