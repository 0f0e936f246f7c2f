#pragma once
// Initial parameter values from each parameter's `init` attribute: "normal(STD)",
// "ones", "zeros" (absent means zeros). Values come from a counter-based generator
// keyed by (seed, parameter name), so they do not depend on parameter order, thread
// count or platform.
#include <cstdint>

#include "ir/node.h"
#include "runtime/tensor.h"

namespace pgq {

// Fills `tensor` (f32, the parameter's type) per `param`'s init attribute. Throws
// pgq::Error naming the parameter for an init it does not understand.
void initParameter(const Node& param, uint64_t seed, Tensor& tensor);

}  // namespace pgq
