#include "ir/gemm_meta.h"

namespace pgq {
namespace {

// The direction names, then "bwd": what a filter accepts, in the order messages list it.
constexpr std::array<std::string_view, 4> kFilterNames = {"fwd", "bwd", "bwd_dgrad", "bwd_wgrad"};
static_assert(kFilterNames[0] == nameOf(GemmDirection::kFwd) && kFilterNames[2] == nameOf(GemmDirection::kBwdDgrad) &&
              kFilterNames[3] == nameOf(GemmDirection::kBwdWgrad));

}  // namespace

std::optional<DirectionFilter> DirectionFilter::parse(std::string_view text) {
  if (text == kAnyBackwardName) return anyBackward();
  if (std::optional<GemmDirection> d = parseName<GemmDirection>(text)) return DirectionFilter(*d);
  return std::nullopt;
}

std::span<const std::string_view> DirectionFilter::names() { return kFilterNames; }

}  // namespace pgq
