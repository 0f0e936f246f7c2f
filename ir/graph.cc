#include "ir/graph.h"

#include <algorithm>
#include <unordered_set>

#include <fmt/format.h>

#include "ir/infer.h"
#include "support/errors.h"

namespace pgq {

std::string TensorType::toString() const {
  return fmt::format("{}{}", dtypeName(dtype), shape.toString());
}

Graph::Graph(std::string name) : name_(std::move(name)) {}

Node* Graph::create(Op op, std::vector<Node*> operands, Attrs attrs,
                    std::optional<TensorType> type, std::string name) {
  std::vector<TensorType> operand_types;
  for (Node* operand : operands) {
    PGQ_ASSERT(operand != nullptr, "null operand for a new {} node", opName(op));
    PGQ_ASSERT(find(operand->name()) == operand, "operand %{} of a new {} node is not in graph @{}",
               operand->name(), opName(op), name_);
    operand_types.push_back(operand->type());
  }
  TensorType result = inferType(op, operand_types, attrs, type);
  if (name.empty()) {
    name = uniqueName("");
  } else if (by_name_.count(name)) {
    throw Error(fmt::format("a value named %{} already exists", name));
  }
  auto node = std::unique_ptr<Node>(
      new Node(op, std::move(result), std::move(operands), std::move(attrs), name, next_id_++));
  Node* raw = node.get();
  for (Node* operand : raw->operands_) operand->users_.push_back(raw);
  by_name_.emplace(std::move(name), raw);
  nodes_.push_back(std::move(node));
  return raw;
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& node : nodes_) out.push_back(node.get());
  return out;
}

Node* Graph::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : it->second;
}

void Graph::addOutput(Node* node) {
  PGQ_ASSERT(node && find(node->name()) == node, "output is not a node of graph @{}", name_);
  outputs_.push_back(node);
}

void Graph::setOutputs(std::vector<Node*> nodes) {
  for (Node* node : nodes)
    PGQ_ASSERT(node && find(node->name()) == node, "output is not a node of graph @{}", name_);
  outputs_ = std::move(nodes);
}

std::unique_ptr<Graph> Graph::clone(std::unordered_map<const Node*, Node*>* copies) const {
  auto out = std::make_unique<Graph>(name_);
  std::unordered_map<const Node*, Node*> local;
  std::unordered_map<const Node*, Node*>& map = copies ? *copies : local;
  for (const Node* node : postOrder()) {
    std::vector<Node*> operands;
    operands.reserve(node->operands_.size());
    for (const Node* operand : node->operands_) operands.push_back(map.at(operand));
    map[node] = out->create(node->op_, std::move(operands), node->attrs_, node->type_, node->name_);
  }
  std::vector<Node*> outputs;
  for (const Node* node : outputs_) outputs.push_back(map.at(node));
  out->outputs_ = std::move(outputs);
  return out;
}

std::vector<Node*> Graph::postOrder() const {
  // Iterative DFS (graphs read from files may be arbitrarily deep). A node is "open"
  // while its operands are being visited; meeting an open node again is a cycle. Marks
  // are indexed by node id (unique and below next_id_): passes and the verifier walk
  // the whole graph many times, and a hash map of marks made that walk several times
  // slower on large graphs.
  enum class Mark : uint8_t { kNone, kOpen, kDone };
  std::vector<Mark> marks(static_cast<size_t>(next_id_), Mark::kNone);
  auto markOf = [&](const Node* node) -> Mark& {
    PGQ_ASSERT(node->id() >= 0 && node->id() < next_id_, "%{} is not a node of graph @{}", node->name(), name_);
    return marks[static_cast<size_t>(node->id())];
  };
  std::vector<Node*> order;
  order.reserve(nodes_.size());
  std::vector<std::pair<Node*, int>> stack;
  for (const auto& root : nodes_) {
    if (markOf(root.get()) != Mark::kNone) continue;
    stack.push_back({root.get(), 0});
    markOf(root.get()) = Mark::kOpen;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->numOperands()) {
        Node* operand = node->operand(next++);
        Mark& mark = markOf(operand);
        if (mark == Mark::kOpen)
          throw Error(fmt::format("graph @{} has a cycle through %{}", name_, operand->name()));
        if (mark == Mark::kNone) {
          mark = Mark::kOpen;
          stack.push_back({operand, 0});
        }
      } else {
        markOf(node) = Mark::kDone;
        order.push_back(node);
        stack.pop_back();
      }
    }
  }
  return order;
}

void Graph::addUse(Node* user, Node* value) { value->users_.push_back(user); }

void Graph::dropUse(Node* user, Node* value) {
  auto it = std::find(value->users_.begin(), value->users_.end(), user);
  PGQ_ASSERT(it != value->users_.end(), "%{} is not a user of %{}", user->name(), value->name());
  value->users_.erase(it);
}

void Graph::setOperand(Node* user, int index, Node* value) {
  PGQ_ASSERT(index >= 0 && index < user->numOperands(), "operand index {} out of range", index);
  PGQ_ASSERT(value->type() == user->operand(index)->type(),
             "cannot replace operand {} of %{} ({}) with %{} ({})", index, user->name(),
             user->operand(index)->type().toString(), value->name(), value->type().toString());
  dropUse(user, user->operands_[static_cast<size_t>(index)]);
  user->operands_[static_cast<size_t>(index)] = value;
  addUse(user, value);
}

void Graph::replaceAllUsesWith(Node* from, Node* to) {
  PGQ_ASSERT(from != to, "replacing %{} with itself", from->name());
  PGQ_ASSERT(from->type() == to->type(), "cannot replace %{} ({}) with %{} ({})", from->name(),
             from->type().toString(), to->name(), to->type().toString());
  std::vector<Node*> users = from->users_;
  for (Node* user : users)
    for (int i = 0; i < user->numOperands(); ++i)
      if (user->operand(i) == from) setOperand(user, i, to);
  for (Node*& output : outputs_)
    if (output == from) output = to;
}

int Graph::removeDead() {
  std::unordered_set<const Node*> live;
  std::vector<Node*> work(outputs_.begin(), outputs_.end());
  for (const auto& node : nodes_)
    if (node->op() == Op::kParameter || node->op() == Op::kInput) work.push_back(node.get());
  while (!work.empty()) {
    Node* node = work.back();
    work.pop_back();
    if (!live.insert(node).second) continue;
    for (Node* operand : node->operands()) work.push_back(operand);
  }
  int removed = 0;
  for (const auto& node : nodes_) {
    if (live.count(node.get())) continue;
    for (Node* operand : node->operands()) {
      if (live.count(operand)) dropUse(node.get(), operand);
    }
    by_name_.erase(node->name());
    ++removed;
  }
  std::erase_if(nodes_, [&](const auto& node) { return !live.count(node.get()); });
  return removed;
}

std::string Graph::uniqueName(std::string_view base) const {
  if (base.empty()) {
    for (int64_t i = next_id_;; ++i) {
      std::string candidate = fmt::format("t{}", i);
      if (!by_name_.count(candidate)) return candidate;
    }
  }
  std::string candidate(base);
  for (int64_t i = 1; by_name_.count(candidate); ++i) candidate = fmt::format("{}.{}", base, i);
  return candidate;
}

}  // namespace pgq
