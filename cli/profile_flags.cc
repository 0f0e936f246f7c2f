#include "cli/profile_flags.h"

#include <optional>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/number_flags.h"
#include "support/errors.h"
#include "support/option_ranges.h"

namespace pgq::cli {

ScaleLayout parseGranularity(std::string_view flag, const std::string& text) {
  std::optional<ScaleLayout> layout;
  try {
    layout = ScaleLayout::parse(text);
  } catch (const Error&) {
  }
  // A plain granularity: refinements (asym, clip) are a policy's to choose.
  if (!layout || layout->text().find(':') != std::string::npos)
    throw Error(fmt::format("{}: expected tensor, channel or block<N>, got '{}'", flag, text));
  return *layout;
}

void addProfileFormatFlags(CLI::App* cmd, ProfileAsk& ask, const std::string& when) {
  cmd->add_flag("--profile-outputs", ask.outputs, fmt::format("{} every GEMM's result", when));
  cmd->add_flag("--profile-metrics", ask.metrics,
                fmt::format("{} the statistics of the metrics beyond SQNR (docs/METRICS.md): each operand's bias-aware "
                            "SQNR per format; each GEMM's reach (the share of the weight gradients its result flows "
                            "into; weighted by their norms with --profile-outputs); and the SQNR of each GEMM's result "
                            "with both inputs quantized (int at --profile-bits/--profile-granularity and int8 per "
                            "channel, at the width this CPU runs exactly, and the --profile-formats FP8/MX schemes; "
                            "round to nearest, gradients also stochastic). Each profiled step gets slower: one extra "
                            "quantized GEMM per GEMM and format pair, and one more pass over each operand per format",
                            when));
  addNumber(cmd, ranges::kProfileBits, ask.bits, fmt::format("{} formats of these bits (int8 per-channel always)", when));
  cmd->add_option_function<std::string>(
         "--profile-granularity",
         [&ask](const std::string& text) { ask.granularity = parseGranularity("--profile-granularity", text); },
         fmt::format("{} this scale granularity: tensor, channel or block<N>; default {}", when,
                     ask.granularity.text()))
      ->type_name("TEXT");
  cmd->add_option_function<std::string>(
         "--profile-formats",
         [&ask](const std::string& text) {
           ask.candidates.clear();
           for (const std::string& item : listItems("--profile-formats", text)) {
             try {
               ask.candidates.push_back(parseProfileCandidate(item));
             } catch (const Error& e) {
               throw Error(fmt::format("--profile-formats: {}", e.what()));
             }
           }
         },
         fmt::format("{} these format schemes ({}) or formats (e4m3:channel:rtn), comma-separated", when,
                     fmt::join(kFormatSchemes, ", ")))
      ->check(kNonEmptyList)
      ->type_name("LIST");
}

const char* givenProfileFlag(const CLI::App* cmd) {
  for (const char* flag : {"--profile-formats", "--profile-metrics", "--profile-outputs", "--profile-bits",
                           "--profile-granularity", "--profile-amax-history", "--profile-warmup"})
    if (cmd->get_option_no_throw(flag) != nullptr && cmd->count(flag) > 0) return flag;
  return nullptr;
}

}  // namespace pgq::cli
