#pragma once
// Creates passes by the names listed in passes.def, with their options given as text:
// "cse", "quantize_gemms{recipe=r.yaml,seed=3}" (syntax in passes/pass_options.h).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "passes/pass.h"
#include "passes/pass_options.h"

namespace pgq {

// Throws pgq::Error for an unknown name (listing the known ones) and for bad options
// (naming the pass, the key and the pass's keys).
std::unique_ptr<Pass> createPass(std::string_view text);
std::vector<std::string_view> passNames();

// A registered pass as `pgq ir opt --help` lists it.
struct PassHelp {
  std::string_view name;
  std::string_view summary;
  std::vector<OptionHelp> options;
};
std::vector<PassHelp> passHelp();

}  // namespace pgq
