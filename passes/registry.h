#pragma once
// Creates passes by the names listed in passes.def.
#include <memory>
#include <string_view>
#include <vector>

#include "passes/pass.h"

namespace pgq {

// Throws pgq::Error for an unknown name, listing the known ones.
std::unique_ptr<Pass> createPass(std::string_view name);
std::vector<std::string_view> passNames();

}  // namespace pgq
