#include "passes/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "passes/bf16_gemms.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/estimate_speedup.h"
#include "passes/fuse_decomposed.h"
#include "passes/fuse_softmax.h"
#include "passes/fuse_swiglu.h"
#include "passes/data_parallel.h"
#include "passes/instrument_stats.h"
#include "passes/partition_spmd.h"
#include "passes/propagate_sharding.h"
#include "passes/quantize_gemms.h"
#include "passes/tag_metadata.h"
#include "support/errors.h"

namespace pgq {
namespace {

// A pass declares options by having an options struct and a table of them.
template <class P>
concept HasOptions = requires {
  typename P::Options;
  P::kOptions;
};

template <class P>
std::unique_ptr<Pass> make(const PassSpec& spec) {
  if constexpr (HasOptions<P>) {
    return std::make_unique<P>(parsePassOptions<typename P::Options>(spec, P::kOptions));
  } else {
    option_detail::checkKeys(spec, {spec.name, {}, {}});  // refuses any option
    return std::make_unique<P>();
  }
}

template <class P>
std::vector<OptionHelp> describe() {
  if constexpr (HasOptions<P>) {
    return describePassOptions<typename P::Options>(P::kOptions);
  } else {
    return {};
  }
}

struct PassEntry {
  std::string_view name;
  std::string_view summary;
  std::unique_ptr<Pass> (*make)(const PassSpec&);
  std::vector<OptionHelp> (*describe)();
};

const PassEntry kPasses[] = {
#define PASS(cls, text, summary) {text, summary, make<cls>, describe<cls>},
#include "passes/passes.def"
#undef PASS
};

}  // namespace

std::unique_ptr<Pass> createPass(std::string_view text) {
  PassSpec spec = parsePassSpec(text);
  for (const PassEntry& entry : kPasses)
    if (entry.name == spec.name) return entry.make(spec);
  throw Error(fmt::format("unknown pass '{}' (known passes: {})", spec.name, fmt::join(passNames(), ", ")));
}

std::vector<std::string_view> passNames() {
  std::vector<std::string_view> names;
  for (const PassEntry& entry : kPasses) names.push_back(entry.name);
  return names;
}

std::vector<PassHelp> passHelp() {
  std::vector<PassHelp> help;
  for (const PassEntry& entry : kPasses) help.push_back({entry.name, entry.summary, entry.describe()});
  return help;
}

}  // namespace pgq
