#include "ir/op.h"

#include <algorithm>
#include <array>
#include <vector>

namespace pgq {
namespace {

struct OpInfo {
  std::string_view name;
  int arity;
  TypeRule rule;
  std::vector<AttrKey> attrs;
};

// The attribute ids of ops.def lines (Perm, Label, ...) as AttrKey constants, so an
// OP(...) line's trailing arguments form an initializer list of keys.
namespace attr_ids {
#define ATTR(id, text, kind) constexpr AttrKey id = AttrKey::k##id;
#include "ir/attrs.def"
#undef ATTR
}  // namespace attr_ids
using namespace attr_ids;

const std::array kOpInfo = {
#define OP(id, text, arity, rule, ...) \
  OpInfo{text, arity, TypeRule::k##rule, {__VA_ARGS__}},
#include "ir/ops.def"
#undef OP
};

const OpInfo& info(Op op) { return kOpInfo[static_cast<size_t>(op)]; }

}  // namespace

std::string_view opName(Op op) { return info(op).name; }
int opArity(Op op) { return info(op).arity; }
TypeRule opTypeRule(Op op) { return info(op).rule; }

bool opAllowsAttr(Op op, AttrKey key) {
  if (key == AttrKey::kSplit) return true;  // a property of any value, not of an op
  const auto& attrs = info(op).attrs;
  return std::find(attrs.begin(), attrs.end(), key) != attrs.end();
}

std::optional<Op> parseOp(std::string_view text) {
  for (size_t i = 0; i < kOpInfo.size(); ++i)
    if (kOpInfo[i].name == text) return static_cast<Op>(i);
  return std::nullopt;
}

}  // namespace pgq
