#pragma once
// The op enum and its static properties, generated from ops.def.
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "ir/attr.h"

namespace pgq {

enum class Op : uint8_t {
#define OP(id, text, arity, rule, ...) k##id,
#include "ir/ops.def"
#undef OP
};

enum class TypeRule : uint8_t { kInferred, kDeclared };

std::string_view opName(Op op);
std::optional<Op> parseOp(std::string_view text);
int opArity(Op op);
TypeRule opTypeRule(Op op);
// The keys ops.def lists for `op`, and `split` on every op.
bool opAllowsAttr(Op op, AttrKey key);

}  // namespace pgq
