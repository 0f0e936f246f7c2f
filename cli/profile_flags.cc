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
  addNumber(cmd, ranges::kProfileBits, ask.bits, fmt::format("{} formats of these bits (int8 per-channel always)", when));
  cmd->add_option_function<std::string>(
         "--profile-granularity",
         [&ask](const std::string& text) { ask.granularity = parseGranularity("--profile-granularity", text); },
         fmt::format("{} this scale granularity: tensor, channel or block<N>; default {}", when,
                     ask.granularity.text()))
      ->type_name("TEXT");
  cmd->add_option_function<std::vector<std::string>>(
         "--profile-formats",
         [&ask](const std::vector<std::string>& items) {
           ask.candidates.clear();
           for (const std::string& item : items) {
             try {
               ask.candidates.push_back(parseProfileCandidate(item));
             } catch (const Error& e) {
               throw Error(fmt::format("--profile-formats: {}", e.what()));
             }
           }
         },
         fmt::format("{} these format schemes ({}) or formats (e4m3:channel:rtn), comma-separated", when,
                     fmt::join(kFormatSchemes, ", ")))
      ->delimiter(',');
}

}  // namespace pgq::cli
