#pragma once
// A graph owns its nodes and is the only code that edits edges. Every node is checked
// when it is created (arity, operand ownership, attributes, result type), so a graph
// built through this API is well typed by construction; the verifier re-checks the
// invariants that passes could break.
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/node.h"

namespace pgq {

class Graph {
 public:
  explicit Graph(std::string name = "main");
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  // A pass that builds a new graph (partition_spmd) moves it into the one it was given.
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  const std::string& name() const { return name_; }

  // Creates a node. For an Inferred op the result type is computed and, when `type` is
  // given, must equal it; a Declared op needs `type`. Throws pgq::Error on an invalid
  // node (wrong arity, bad attribute, shape mismatch) with a message saying what was
  // expected. `name` must be unique when given; an empty name gets a fresh one.
  Node* create(Op op, std::vector<Node*> operands, Attrs attrs = {},
               std::optional<TensorType> type = std::nullopt, std::string name = "");

  // Nodes in creation order (not necessarily a topological order once passes have
  // rewired uses: use postOrder() to walk dependencies first).
  std::vector<Node*> nodes() const;
  size_t size() const { return nodes_.size(); }
  Node* find(std::string_view name) const;

  // The values the graph computes (a training graph: loss, gradients, statistics).
  std::span<Node* const> outputs() const { return outputs_; }
  void addOutput(Node* node);
  void setOutputs(std::vector<Node*> nodes);

  // Every node, operands before users. Roots are taken in creation order, so a graph
  // whose creation order is already topological walks in exactly that order (this
  // makes print -> parse -> print stable). Throws pgq::Error on a cycle.
  std::vector<Node*> postOrder() const;

  // Points every use of `from` (operands and outputs) at `to`; types must match.
  void replaceAllUsesWith(Node* from, Node* to);
  // Replaces operand `index` of `user` with `value` (same type).
  void setOperand(Node* user, int index, Node* value);
  // Removes nodes that no output depends on. Parameters and inputs are the graph's
  // interface and always stay. Returns the number of nodes removed.
  int removeDead();

  // A copy: the same nodes (op, name, type, attributes, operands) in the same order
  // (operands first), the same outputs and name. `copies`, when given, receives each
  // node's copy, so that a caller can map the nodes it holds (an imported model's
  // parameters and inputs) into the new graph.
  std::unique_ptr<Graph> clone(std::unordered_map<const Node*, Node*>* copies = nullptr) const;

  // A name not used in the graph yet, derived from `base`.
  std::string uniqueName(std::string_view base) const;

 private:
  void addUse(Node* user, Node* value);
  void dropUse(Node* user, Node* value);

  std::string name_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::unordered_map<std::string, Node*> by_name_;
  std::vector<Node*> outputs_;
  int64_t next_id_ = 0;
};

}  // namespace pgq
