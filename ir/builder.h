#pragma once
// Convenience constructors for every op. Each call goes through Graph::create, which
// checks operands and infers the result type before the node exists, so a builder
// call either returns a well-typed node or throws pgq::Error.
//
// Names: `scope("layer0/attn")` prefixes the names of nodes created while the scope
// object lives ("layer0/attn/q"); names stay unique (a suffix is added on collision).
#include <string>
#include <string_view>
#include <vector>

#include "ir/dot_dims.h"
#include "ir/graph.h"

namespace pgq {

class Builder {
 public:
  explicit Builder(Graph& graph) : graph_(graph) {}

  Graph& graph() { return graph_; }

  // RAII name scope.
  class Scope {
   public:
    Scope(Builder& builder, std::string_view name);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Builder& builder_;
    size_t saved_;
  };
  Scope scope(std::string_view name) { return Scope(*this, name); }

  // Interface.
  Node* parameter(std::string_view name, TensorType type, std::string_view init = "");
  Node* input(std::string_view name, TensorType type);
  Node* constant(double value, TensorType type, std::string_view name = "");
  Node* scalar(double value) { return constant(value, {DType::kF32, Shape()}); }

  // Elementwise.
  Node* add(Node* a, Node* b, std::string_view name = "") { return binary(Op::kAdd, a, b, name); }
  Node* sub(Node* a, Node* b, std::string_view name = "") { return binary(Op::kSub, a, b, name); }
  Node* mul(Node* a, Node* b, std::string_view name = "") { return binary(Op::kMul, a, b, name); }
  Node* div(Node* a, Node* b, std::string_view name = "") { return binary(Op::kDiv, a, b, name); }
  Node* max(Node* a, Node* b, std::string_view name = "") { return binary(Op::kMax, a, b, name); }
  Node* ge(Node* a, Node* b, std::string_view name = "") { return binary(Op::kGe, a, b, name); }
  Node* binary(Op op, Node* a, Node* b, std::string_view name = "");
  Node* unary(Op op, Node* x, std::string_view name = "");
  // x * c for a scalar constant c (broadcast explicitly).
  Node* scale(Node* x, double c, std::string_view name = "");
  Node* convert(Node* x, DType dtype, std::string_view name = "");

  // Layout.
  Node* transpose(Node* x, std::vector<int64_t> perm, std::string_view name = "");
  Node* reshape(Node* x, Shape shape, std::string_view name = "");
  Node* broadcast(Node* x, Shape shape, std::vector<int64_t> dims, std::string_view name = "");
  // Broadcasts x to `shape` by aligning x's dims with the trailing dims of `shape`.
  Node* broadcastTrailing(Node* x, const Shape& shape, std::string_view name = "");
  Node* reduce(Op op, Node* x, std::vector<int64_t> axes, std::string_view name = "");
  // The box [starts, limits) of x, stride 1.
  Node* slice(Node* x, std::vector<int64_t> starts, std::vector<int64_t> limits,
              std::string_view name = "");
  // x with low[i] zeros before and high[i] zeros after dim i.
  Node* pad(Node* x, std::vector<int64_t> low, std::vector<int64_t> high, std::string_view name = "");
  Node* concat(Node* a, Node* b, int64_t axis, std::string_view name = "");
  // a where cond (f32) is nonzero, else b.
  Node* select(Node* cond, Node* a, Node* b, std::string_view name = "");

  // Attention, normalization, embedding, loss.
  Node* softmax(Node* x, std::string_view name = "") { return unary(Op::kSoftmax, x, name); }
  Node* causalMask(Node* x, double value, std::string_view name = "");
  // Rotary embedding of x [B,H,T,Dh] with frequency base `theta` (ops.def).
  Node* rope(Node* x, double theta, RopeRotation rotation = RopeRotation::kForward, std::string_view name = "");
  Node* norm(Op op, Node* x, double eps, std::string_view name = "");          // rms_norm / layer_norm
  Node* normGrad(Op op, Node* x, Node* dy, double eps, std::string_view name = "");
  Node* gather(Node* table, Node* indices, std::string_view name = "");
  Node* scatterAdd(Node* dy, Node* indices, const Shape& table_shape, std::string_view name = "");
  Node* crossEntropy(Node* logits, Node* targets, std::string_view name = "");
  Node* crossEntropyGrad(Node* logits, Node* targets, Node* dloss, std::string_view name = "");

  // Collectives over `group` (ops.def).
  Node* allReduce(Node* x, DeviceGroup group, Reduction reduce, std::string_view name = "");
  // all_gather, reduce_scatter or shard along `axis` over `devices` devices.
  Node* collective(Op op, Node* x, DeviceGroup group, int64_t axis, int64_t devices, std::string_view name = "");

  // GEMM. `label` is the GEMM's stable, readable name ("layer0/attn/q").
  Node* matmul(Node* lhs, Node* rhs, const DotDims& dims, std::string_view label = "",
               std::string_view name = "");

  // Generic form used by passes that copy nodes.
  Node* create(Op op, std::vector<Node*> operands, Attrs attrs,
               std::optional<TensorType> type = std::nullopt, std::string_view name = "");

 private:
  std::string scopedName(std::string_view name) const;

  Graph& graph_;
  std::string prefix_;
};

}  // namespace pgq
