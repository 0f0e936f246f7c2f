#include "frontend/sharding_rules.h"

#include <vector>

#include <fmt/format.h>

#include "ir/op.h"
#include "support/config_file.h"
#include "support/errors.h"

namespace pgq {
namespace {

// The first node that reads parameter `p` other than as a GEMM operand or an embedding
// table (through transposes, reshapes, broadcasts and conversions), or null. Those are
// the parameters a split is correct for: the partitioner turns a split operand of a GEMM
// into local GEMMs and collectives. A norm gain or a bias split along the hidden dim is
// not: the elementwise product runs per shard while the statistics and the gradients
// around it need the whole dim (a split RMSNorm gain gave a 1.5% wrong gradient norm and
// a NaN loss at step 2).
const Node* nonGemmUse(const Node* p) {
  std::vector<const Node*> work{p};
  while (!work.empty()) {
    const Node* n = work.back();
    work.pop_back();
    for (const Node* user : n->users()) {
      switch (user->op()) {
        case Op::kTranspose: case Op::kReshape: case Op::kBroadcast: case Op::kConvert:
          work.push_back(user);
          break;
        case Op::kMatMul:
          break;
        case Op::kGather:
          if (user->operand(0) != n) return user;
          break;
        default:
          return user;
      }
    }
  }
  return nullptr;
}

}  // namespace

ShardingRules loadShardingRules(const std::string& path) {
  ConfigNode root = ConfigNode::loadFile(path, InputKind::kShardingRules);
  root.allowOnly({"rules"});
  ShardingRules out;
  out.path = path;
  for (const ConfigNode& r : root.child("rules").items()) {
    r.allowOnly({"pattern", "dim"});
    ShardingRule rule;
    rule.line = static_cast<int>(r.yaml().Mark().line) + 1;
    std::string pattern = r.getString("pattern");
    if (pattern.empty()) r.fail("pattern", "must not be empty");
    try {
      rule.pattern = LabelPattern(pattern);
    } catch (const Error& e) {
      r.fail("pattern", e.what());
    }
    rule.dim = r.getInt("dim", 0, 7);
    out.rules.push_back(std::move(rule));
  }
  if (out.rules.empty()) throw Error(fmt::format("{}: field 'rules' lists no rule", path));
  return out;
}

void applyShardingRules(const ShardingRules& rules, std::span<Node* const> params, int64_t devices) {
  std::vector<int> matched(rules.rules.size(), 0);
  for (Node* p : params) {
    for (size_t i = 0; i < rules.rules.size(); ++i) {
      const ShardingRule& r = rules.rules[i];
      if (!r.pattern.matches(p->name())) continue;
      if (r.dim >= p->shape().rank())
        throw Error(fmt::format("{}:{}: rule '{}' splits dim {} of {}, which is {}", rules.path, r.line,
                                r.pattern.text(), r.dim, p->name(), p->type().toString()));
      if (const Node* use = nonGemmUse(p))
        throw Error(fmt::format("{}:{}: rule '{}' splits {}, which {} %{} reads: pgq splits only GEMM weights and "
                                "embedding tables over devices (a norm gain or bias split along its dim would need "
                                "the whole dim on each device); leave it out of the rules and it stays whole",
                                rules.path, r.line, r.pattern.text(), p->name(), opName(use->op()), use->name()));
      if (p->shape().dim(static_cast<int>(r.dim)) % devices != 0)
        throw Error(fmt::format("{}:{}: rule '{}' splits dim {} of {} ({}) over {} devices, which does not divide it",
                                rules.path, r.line, r.pattern.text(), r.dim, p->name(), p->type().toString(), devices));
      p->attrs().set(AttrKey::kSplit, std::vector<int64_t>{r.dim, devices});
      ++matched[i];
      break;
    }
  }
  for (size_t i = 0; i < rules.rules.size(); ++i)
    if (matched[i] == 0)
      throw Error(fmt::format("{}:{}: rule '{}' matches no trainable parameter of the model (pgq import lists them)",
                              rules.path, rules.rules[i].line, rules.rules[i].pattern.text()));
}

}  // namespace pgq
