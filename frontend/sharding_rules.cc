#include "frontend/sharding_rules.h"

#include <fmt/format.h>

#include "support/config_file.h"
#include "support/errors.h"

namespace pgq {

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
