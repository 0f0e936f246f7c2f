#pragma once
// Result-type rules of every op: the single place that knows what operands and
// attributes an op accepts. Graph::create, the verifier and the parser all use it.
#include <optional>
#include <span>

#include "ir/attr.h"
#include "ir/node.h"
#include "ir/op.h"

namespace pgq {

// Returns the result type of `op` applied to operands of the given types. For a
// Declared op, `declared` is the result type asked for and is checked. Throws
// pgq::Error naming what was expected.
TensorType inferType(Op op, std::span<const TensorType> operands, const Attrs& attrs,
                     const std::optional<TensorType>& declared);

}  // namespace pgq
