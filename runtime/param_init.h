#pragma once
// Initial parameter values from each parameter's `init` attribute: "normal(STD)",
// "ones", "zeros" (absent means zeros), or "model" (an imported model's own value). Values come from a counter-based generator
// keyed by (seed, parameter name), so they do not depend on parameter order, thread
// count or platform.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/node.h"
#include "runtime/tensor.h"

namespace pgq {

// Fills `tensor` (f32, the parameter's type) per `param`'s init attribute. Throws
// pgq::Error naming the parameter for an init it does not understand.
// "model": the value comes from `values` (an imported model's initializers, by name).
using ParameterValues = std::map<std::string, std::vector<float>>;
void initParameter(const Node& param, uint64_t seed, Tensor& tensor, const ParameterValues* values = nullptr);

}  // namespace pgq
