#include "passes/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/errors.h"
#include "passes/bf16_gemms.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/instrument_stats.h"
#include "passes/propagate_sharding.h"
#include "passes/quantize_gemms.h"
#include "passes/roofline_filter.h"
#include "passes/tag_metadata.h"

namespace pgq {
namespace {

struct PassEntry {
  std::string_view name;
  std::unique_ptr<Pass> (*make)();
};

const PassEntry kPasses[] = {
#define PASS(cls, text) {text, []() -> std::unique_ptr<Pass> { return std::make_unique<cls>(); }},
#include "passes/passes.def"
#undef PASS
};

}  // namespace

std::unique_ptr<Pass> createPass(std::string_view name) {
  for (const PassEntry& entry : kPasses)
    if (entry.name == name) return entry.make();
  throw Error(fmt::format("unknown pass '{}' (known passes: {})", name, fmt::join(passNames(), ", ")));
}

std::vector<std::string_view> passNames() {
  std::vector<std::string_view> names;
  for (const PassEntry& entry : kPasses) names.push_back(entry.name);
  return names;
}

}  // namespace pgq
