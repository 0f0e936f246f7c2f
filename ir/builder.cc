#include "ir/builder.h"

#include "support/errors.h"

namespace pgq {

Builder::Scope::Scope(Builder& builder, std::string_view name)
    : builder_(builder), saved_(builder.prefix_.size()) {
  builder_.prefix_ += std::string(name) + "/";
}

Builder::Scope::~Scope() { builder_.prefix_.resize(saved_); }

std::string Builder::scopedName(std::string_view name) const {
  if (name.empty()) return "";
  return graph_.uniqueName(prefix_ + std::string(name));
}

Node* Builder::create(Op op, std::vector<Node*> operands, Attrs attrs,
                      std::optional<TensorType> type, std::string_view name) {
  return graph_.create(op, std::move(operands), std::move(attrs), std::move(type),
                       scopedName(name));
}

Node* Builder::parameter(std::string_view name, TensorType type, std::string_view init) {
  Attrs attrs;
  if (!init.empty()) attrs.set(AttrKey::kInit, std::string(init));
  return create(Op::kParameter, {}, std::move(attrs), std::move(type), name);
}

Node* Builder::input(std::string_view name, TensorType type) {
  return create(Op::kInput, {}, {}, std::move(type), name);
}

Node* Builder::constant(double value, TensorType type, std::string_view name) {
  Attrs attrs;
  attrs.set(AttrKey::kValue, value);
  return create(Op::kConstant, {}, std::move(attrs), std::move(type), name);
}

Node* Builder::binary(Op op, Node* a, Node* b, std::string_view name) {
  PGQ_ASSERT(opArity(op) == 2, "{} is not a binary op", opName(op));
  return create(op, {a, b}, {}, std::nullopt, name);
}

Node* Builder::unary(Op op, Node* x, std::string_view name) {
  PGQ_ASSERT(opArity(op) == 1, "{} is not a unary op", opName(op));
  return create(op, {x}, {}, std::nullopt, name);
}

Node* Builder::scale(Node* x, double c, std::string_view name) {
  Node* k = constant(c, {x->dtype(), Shape()});
  return mul(x, broadcast(k, x->shape(), {}), name);
}

Node* Builder::convert(Node* x, DType dtype, std::string_view name) {
  return create(Op::kConvert, {x}, {}, TensorType{dtype, x->shape()}, name);
}

Node* Builder::transpose(Node* x, std::vector<int64_t> perm, std::string_view name) {
  Attrs attrs;
  attrs.set(AttrKey::kPerm, std::move(perm));
  return create(Op::kTranspose, {x}, std::move(attrs), std::nullopt, name);
}

Node* Builder::reshape(Node* x, Shape shape, std::string_view name) {
  return create(Op::kReshape, {x}, {}, TensorType{x->dtype(), std::move(shape)}, name);
}

Node* Builder::broadcast(Node* x, Shape shape, std::vector<int64_t> dims, std::string_view name) {
  Attrs attrs;
  attrs.set(AttrKey::kDims, std::move(dims));
  return create(Op::kBroadcast, {x}, std::move(attrs), TensorType{x->dtype(), std::move(shape)},
                name);
}

Node* Builder::broadcastTrailing(Node* x, const Shape& shape, std::string_view name) {
  PGQ_ASSERT(x->shape().rank() <= shape.rank(), "cannot broadcast {} to {}",
             x->shape().toString(), shape.toString());
  std::vector<int64_t> dims;
  for (int i = 0; i < x->shape().rank(); ++i) dims.push_back(shape.rank() - x->shape().rank() + i);
  return broadcast(x, shape, std::move(dims), name);
}

Node* Builder::reduce(Op op, Node* x, std::vector<int64_t> axes, std::string_view name) {
  PGQ_ASSERT(op == Op::kReduceSum || op == Op::kReduceMax || op == Op::kReduceMean,
             "{} is not a reduction", opName(op));
  Attrs attrs;
  attrs.set(AttrKey::kAxes, std::move(axes));
  return create(op, {x}, std::move(attrs), std::nullopt, name);
}

Node* Builder::slice(Node* x, std::vector<int64_t> starts, std::vector<int64_t> limits,
                     std::string_view name) {
  Attrs attrs;
  attrs.set(AttrKey::kStarts, std::move(starts));
  attrs.set(AttrKey::kLimits, std::move(limits));
  return create(Op::kSlice, {x}, std::move(attrs), std::nullopt, name);
}

Node* Builder::pad(Node* x, std::vector<int64_t> low, std::vector<int64_t> high,
                   std::string_view name) {
  Attrs attrs;
  attrs.set(AttrKey::kLow, std::move(low));
  attrs.set(AttrKey::kHigh, std::move(high));
  return create(Op::kPad, {x}, std::move(attrs), std::nullopt, name);
}

Node* Builder::concat(Node* a, Node* b, int64_t axis, std::string_view name) {
  Attrs attrs;
  attrs.set(AttrKey::kAxis, axis);
  return create(Op::kConcat, {a, b}, std::move(attrs), std::nullopt, name);
}

Node* Builder::select(Node* cond, Node* a, Node* b, std::string_view name) {
  return create(Op::kSelect, {cond, a, b}, {}, std::nullopt, name);
}

Node* Builder::causalMask(Node* x, double value, std::string_view name) {
  Attrs attrs;
  attrs.set(AttrKey::kValue, value);
  return create(Op::kCausalMask, {x}, std::move(attrs), std::nullopt, name);
}

Node* Builder::rope(Node* x, double theta, RopeRotation rotation, std::string_view name) {
  Attrs attrs;
  attrs.set(AttrKey::kTheta, theta);
  attrs.set(AttrKey::kRotation, rotation);
  return create(Op::kRope, {x}, std::move(attrs), std::nullopt, name);
}

Node* Builder::allReduce(Node* x, DeviceGroup group, Reduction reduce, std::string_view name) {
  Attrs attrs;
  attrs.set(AttrKey::kGroup, group);
  attrs.set(AttrKey::kReduce, reduce);
  return create(Op::kAllReduce, {x}, std::move(attrs), std::nullopt, name);
}

Node* Builder::collective(Op op, Node* x, DeviceGroup group, int64_t axis, int64_t devices, std::string_view name) {
  PGQ_ASSERT(op == Op::kAllGather || op == Op::kReduceScatter || op == Op::kShard, "{} is not a sharded collective",
             opName(op));
  Attrs attrs;
  attrs.set(AttrKey::kGroup, group);
  attrs.set(AttrKey::kAxis, axis);
  attrs.set(AttrKey::kDevices, devices);
  return create(op, {x}, std::move(attrs), std::nullopt, name);
}

Node* Builder::norm(Op op, Node* x, double eps, std::string_view name) {
  PGQ_ASSERT(op == Op::kRmsNorm || op == Op::kLayerNorm, "{} is not a norm", opName(op));
  Attrs attrs;
  attrs.set(AttrKey::kEps, eps);
  return create(op, {x}, std::move(attrs), std::nullopt, name);
}

Node* Builder::normGrad(Op op, Node* x, Node* dy, double eps, std::string_view name) {
  PGQ_ASSERT(op == Op::kRmsNormGrad || op == Op::kLayerNormGrad, "{} is not a norm gradient",
             opName(op));
  Attrs attrs;
  attrs.set(AttrKey::kEps, eps);
  return create(op, {x, dy}, std::move(attrs), std::nullopt, name);
}

Node* Builder::gather(Node* table, Node* indices, std::string_view name) {
  return create(Op::kGather, {table, indices}, {}, std::nullopt, name);
}

Node* Builder::scatterAdd(Node* dy, Node* indices, const Shape& table_shape,
                          std::string_view name) {
  return create(Op::kScatterAdd, {dy, indices}, {}, TensorType{dy->dtype(), table_shape}, name);
}

Node* Builder::crossEntropy(Node* logits, Node* targets, std::string_view name) {
  return create(Op::kCrossEntropy, {logits, targets}, {}, std::nullopt, name);
}

Node* Builder::crossEntropyGrad(Node* logits, Node* targets, Node* dloss, std::string_view name) {
  return create(Op::kCrossEntropyGrad, {logits, targets, dloss}, {}, std::nullopt, name);
}

Node* Builder::matmul(Node* lhs, Node* rhs, const DotDims& dims, std::string_view label,
                      std::string_view name) {
  Attrs attrs;
  dims.toAttrs(attrs);
  if (!label.empty()) attrs.set(AttrKey::kLabel, std::string(label));
  return create(Op::kMatMul, {lhs, rhs}, std::move(attrs), std::nullopt, name);
}

}  // namespace pgq
