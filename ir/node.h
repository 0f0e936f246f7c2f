#pragma once
// One node type for every op (ggml/XLA style): an opcode, a result type, operands,
// typed attributes, and the list of its users. Only Graph edits edges, so operand and
// user lists can never disagree.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ir/attr.h"
#include "ir/dtype.h"
#include "ir/op.h"
#include "ir/shape.h"

namespace pgq {

struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;

  std::string toString() const;  // "f32[2,3]"
  bool operator==(const TensorType& other) const = default;
};

class Graph;

class Node {
 public:
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  Op op() const { return op_; }
  const std::string& name() const { return name_; }
  const TensorType& type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  // A number unique within the graph, increasing in creation order.
  int64_t id() const { return id_; }

  int numOperands() const { return static_cast<int>(operands_.size()); }
  Node* operand(int i) const { return operands_[static_cast<size_t>(i)]; }
  std::span<Node* const> operands() const { return operands_; }
  // One entry per use: a node that uses this one twice appears twice.
  std::span<Node* const> users() const { return users_; }

  // Attributes may be edited in place (passes add metadata tags); edits that change
  // the meaning of the node are caught by the verifier.
  const Attrs& attrs() const { return attrs_; }
  Attrs& attrs() { return attrs_; }


 private:
  friend class Graph;
  Node(Op op, TensorType type, std::vector<Node*> operands, Attrs attrs, std::string name,
       int64_t id)
      : op_(op), type_(std::move(type)), operands_(std::move(operands)),
        attrs_(std::move(attrs)), name_(std::move(name)), id_(id) {}

  Op op_;
  TensorType type_;
  std::vector<Node*> operands_;
  std::vector<Node*> users_;
  Attrs attrs_;
  std::string name_;
  int64_t id_;
};

}  // namespace pgq
