#include "runtime/param_init.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "kernels/philox.h"
#include "support/errors.h"
#include "support/hash.h"

namespace pgq {
namespace {

// Parses "normal(0.02)" into 0.02.
std::optional<double> normalStd(const std::string& init) {
  if (!init.starts_with("normal(") || !init.ends_with(")")) return std::nullopt;
  std::string number = init.substr(7, init.size() - 8);
  double value = 0;
  auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || ptr != number.data() + number.size() || !(value >= 0) || !std::isfinite(value))
    return std::nullopt;
  return value;
}

}  // namespace

void initParameter(const Node& param, uint64_t seed, Tensor& tensor, const ParameterValues* values) {
  std::string init = param.attrs().getStringOr(AttrKey::kInit, "zeros");
  if (init == "model") {
    auto it = values ? values->find(param.name()) : ParameterValues::const_iterator{};
    if (!values || it == values->end())
      throw Error(fmt::format("parameter %{}: its value comes from the model file, which is not loaded", param.name()));
    PGQ_ASSERT(tensor.type() == param.type() && static_cast<int64_t>(it->second.size()) == tensor.numElements(),
               "parameter %{}: {} values for a {} tensor", param.name(), it->second.size(), tensor.type().toString());
    if (param.dtype() == DType::kS32) {
      std::transform(it->second.begin(), it->second.end(), tensor.data<int32_t>(),
                     [](float v) { return static_cast<int32_t>(v); });
    } else {
      PGQ_ASSERT(param.dtype() == DType::kF32, "parameter %{} of type {}", param.name(), tensor.type().toString());
      std::copy(it->second.begin(), it->second.end(), tensor.data<float>());
    }
    return;
  }
  PGQ_ASSERT(tensor.type() == param.type() && param.dtype() == DType::kF32,
             "parameter %{} initialized into a {} tensor", param.name(), tensor.type().toString());
  float* data = tensor.data<float>();
  const int64_t n = tensor.numElements();
  if (init == "zeros" || init == "ones") {
    std::fill(data, data + n, init == "ones" ? 1.0f : 0.0f);
    return;
  }
  std::optional<double> std = normalStd(init);
  if (!std)
    throw Error(fmt::format("parameter %{}: unknown init \"{}\" (expected normal(STD), ones or zeros)",
                            param.name(), init));
  // Box-Muller on two 32-bit uniforms per pair of values; the stream of each parameter
  // is keyed by its name, so adding a parameter does not change the others.
  uint64_t stream = fnv1a64(param.name());
  kernels::PhiloxKey key = {uint32_t(seed), uint32_t(seed >> 32)};
  constexpr double kTwoPi = 6.283185307179586;
  for (int64_t i = 0; i < n; i += 4) {
    uint64_t c = static_cast<uint64_t>(i / 4);
    kernels::PhiloxCounter out = kernels::philox4x32(
        {uint32_t(c), uint32_t(c >> 32), uint32_t(stream), uint32_t(stream >> 32)}, key);
    for (int pair = 0; pair < 2; ++pair) {
      double u1 = (static_cast<double>(out[2 * pair]) + 1.0) / 4294967296.0;  // (0, 1]
      double u2 = static_cast<double>(out[2 * pair + 1]) / 4294967296.0;
      double r = std::sqrt(-2.0 * std::log(u1)) * *std;
      if (i + 2 * pair < n) data[i + 2 * pair] = static_cast<float>(r * std::cos(kTwoPi * u2));
      if (i + 2 * pair + 1 < n) data[i + 2 * pair + 1] = static_cast<float>(r * std::sin(kTwoPi * u2));
    }
  }
}

}  // namespace pgq
