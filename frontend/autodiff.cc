#include "frontend/autodiff.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "ir/analysis.h"
#include "ir/builder.h"
#include "ir/dot_dims.h"
#include "support/errors.h"

namespace pgq {
namespace {

std::vector<int64_t> iota(int64_t from, int64_t to) {
  std::vector<int64_t> v(static_cast<size_t>(std::max<int64_t>(0, to - from)));
  std::iota(v.begin(), v.end(), from);
  return v;
}

std::vector<int64_t> inversePerm(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return inv;
}

bool isIdentity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// A family's gradient rules reached with an op of another family: backprop()'s dispatch
// is wrong.
[[noreturn]] void notInFamily(const Node* node, const char* family) {
  throw InternalError(fmt::format("autodiff: %{} ({}) was dispatched to the {} gradient rules", node->name(),
                                  opName(node->op()), family));
}

class Autodiff {
 public:
  Autodiff(Graph& graph) : graph_(graph), b_(graph) {}

  std::vector<Node*> run(Node* loss, std::span<Node* const> params);

 private:
  // Adds `grad` to the adjoint of `node`.
  void accumulate(Node* node, Node* grad);
  Node* joinPads(Node* a, Node* b);
  void backprop(Node* node, Node* dy);
  // The gradient rules of one op family each; backprop() picks the family.
  void arithmeticGrad(Node* node, Node* dy);
  void unaryGrad(Node* node, Node* dy);
  void selectGrad(Node* node, Node* dy);
  void layoutGrad(Node* node, Node* dy);
  void concatGrad(Node* node, Node* dy);
  void reduceGrad(Node* node, Node* dy);
  void matmulGrad(Node* node, Node* dy);
  std::string gradName(const Node* of) const { return of->name() + ".grad"; }

  Graph& graph_;
  Builder b_;
  std::unordered_set<const Node*> needs_grad_;
  std::unordered_map<const Node*, Node*> adjoint_;
};

void Autodiff::accumulate(Node* node, Node* grad) {
  if (!needs_grad_.count(node)) return;
  PGQ_ASSERT(grad->type() == node->type() ||
                 (grad->shape() == node->shape() && isFloat(grad->dtype())),
             "gradient {} does not fit {}", grad->type().toString(), node->type().toString());
  if (grad->dtype() != node->dtype()) grad = b_.convert(grad, node->dtype());
  auto [it, inserted] = adjoint_.try_emplace(node, grad);
  if (inserted) return;
  if (Node* joined = joinPads(it->second, grad)) {
    it->second = joined;
    return;
  }
  it->second = b_.add(it->second, grad, gradName(node));
}

// The gradients of slices that tile a value along one axis (q, k, v split from one
// fused projection) are pads of each piece: adjacent pieces concatenate, which moves
// each element once instead of zero-filling and adding whole tensors per piece.
Node* Autodiff::joinPads(Node* a, Node* b) {
  if (a->op() != Op::kPad || b->op() != Op::kPad) return nullptr;
  const auto& a_low = a->attrs().getInts(AttrKey::kLow);
  const auto& a_high = a->attrs().getInts(AttrKey::kHigh);
  const auto& b_low = b->attrs().getInts(AttrKey::kLow);
  const auto& b_high = b->attrs().getInts(AttrKey::kHigh);
  int axis = -1;
  for (size_t d = 0; d < a_low.size(); ++d)
    if (a_low[d] != b_low[d] || a_high[d] != b_high[d]) {
      if (axis >= 0) return nullptr;
      axis = static_cast<int>(d);
    }
  if (axis < 0) return nullptr;
  const size_t ax = static_cast<size_t>(axis);
  const int64_t dim = a->shape().dim(axis);
  Node* first = a;
  Node* second = b;
  if (dim - b_high[ax] == a_low[ax]) std::swap(first, second);  // b's piece comes before a's
  const auto& f_low = first->attrs().getInts(AttrKey::kLow);
  const auto& f_high = first->attrs().getInts(AttrKey::kHigh);
  const auto& s_low = second->attrs().getInts(AttrKey::kLow);
  const auto& s_high = second->attrs().getInts(AttrKey::kHigh);
  if (dim - f_high[ax] != s_low[ax]) return nullptr;  // not adjacent
  Node* joined = b_.concat(first->operand(0), second->operand(0), axis);
  std::vector<int64_t> low = f_low, high = f_high;
  high[ax] = s_high[ax];
  if (std::all_of(low.begin(), low.end(), [](int64_t v) { return v == 0; }) &&
      std::all_of(high.begin(), high.end(), [](int64_t v) { return v == 0; }))
    return joined;
  return b_.pad(joined, std::move(low), std::move(high));
}

void Autodiff::matmulGrad(Node* node, Node* dy) {
  Node* a = node->operand(0);
  Node* bop = node->operand(1);
  DotDims dims = DotDims::fromAttrs(node->attrs());
  const int nb = static_cast<int>(dims.lhs_batch.size());
  std::vector<int64_t> a_free = dims.lhsFree(a->shape().rank());
  std::vector<int64_t> b_free = dims.rhsFree(bop->shape().rank());
  const int na = static_cast<int>(a_free.size());
  const int nbf = static_cast<int>(b_free.size());
  std::string label = node->attrs().getStringOr(AttrKey::kLabel, node->name());
  const int64_t gemm_id = node->attrs().getInt(AttrKey::kGemmId);
  bool a_weight = isWeightValue(a), b_weight = isWeightValue(bop);
  // The label suffix, for people: wgrad or dgrad, and the side when both operands are alike.
  auto suffix = [&](bool weight, bool other_weight, const char* side) {
    std::string kind = weight ? "wgrad" : "dgrad";
    return weight == other_weight ? fmt::format("{}_{}", kind, side) : kind;
  };
  // Positions of the batch, lhs-free and rhs-free dims in dy.
  std::vector<int64_t> dy_batch = iota(0, nb), dy_a = iota(nb, nb + na), dy_b = iota(nb + na, nb + na + nbf);

  // Emits dot(lhs, rhs) whose result is the gradient of operand `wrt` of the forward
  // GEMM up to a permutation `result_dims` (result dim i holds operand dim
  // result_dims[i]), then transposes. The new GEMM records which GEMM and operand it
  // differentiates.
  auto emit = [&](Node* lhs, Node* rhs, DotDims d, const std::vector<int64_t>& result_dims, GemmOperand wrt) {
    Node* target = node->operand(static_cast<int>(indexOf(wrt)));
    if (!needs_grad_.count(target)) return;
    bool lhs_side = wrt == GemmOperand::kLhs;
    std::string s = suffix(lhs_side ? a_weight : b_weight, lhs_side ? b_weight : a_weight, lhs_side ? "lhs" : "rhs");
    Attrs attrs;
    d.toAttrs(attrs);
    attrs.set(AttrKey::kGradOf, gemm_id);
    attrs.set(AttrKey::kWrt, wrt);
    attrs.set(AttrKey::kLabel, fmt::format("{}:{}", label, s));
    Node* g = b_.create(Op::kMatMul, {lhs, rhs}, std::move(attrs), std::nullopt,
                        fmt::format("{}.{}", node->name(), s));
    // result dim i is target dim result_dims[i]: transpose back with the inverse.
    if (!isIdentity(result_dims)) g = b_.transpose(g, inversePerm(result_dims));
    accumulate(target, g);
  };

  // dA = dot(dy, B): contract dy's rhs-free dims with B's free dims.
  // Result dims: batch, A-free, then B's contracting dims in B order, which pair with A's
  // contracting dims.
  {
    std::vector<int64_t> rc_sorted = dims.rhs_contract;
    std::sort(rc_sorted.begin(), rc_sorted.end());
    std::vector<int64_t> result_dims = dims.lhs_batch;
    result_dims.insert(result_dims.end(), a_free.begin(), a_free.end());
    for (int64_t r : rc_sorted) {
      size_t i = std::find(dims.rhs_contract.begin(), dims.rhs_contract.end(), r) - dims.rhs_contract.begin();
      result_dims.push_back(dims.lhs_contract[i]);
    }
    emit(dy, bop, {dy_b, b_free, dy_batch, dims.rhs_batch}, result_dims, GemmOperand::kLhs);
  }
  // dB: two ways to order the product; pick the one whose result needs no transpose
  // (dot(A, dy) for a [K,N] weight, dot(dy, A) for attention's k).
  {
    std::vector<int64_t> lc_sorted = dims.lhs_contract;
    std::sort(lc_sorted.begin(), lc_sorted.end());
    std::vector<int64_t> contracted_in_b;  // B dims paired with A's contracting dims, in A order
    for (int64_t l : lc_sorted) {
      size_t i = std::find(dims.lhs_contract.begin(), dims.lhs_contract.end(), l) - dims.lhs_contract.begin();
      contracted_in_b.push_back(dims.rhs_contract[i]);
    }
    // dot(A, dy): result [batch, A-contract (as B dims), B-free]
    std::vector<int64_t> first = dims.rhs_batch;
    first.insert(first.end(), contracted_in_b.begin(), contracted_in_b.end());
    first.insert(first.end(), b_free.begin(), b_free.end());
    // dot(dy, A): result [batch, B-free, A-contract (as B dims)]
    std::vector<int64_t> second = dims.rhs_batch;
    second.insert(second.end(), b_free.begin(), b_free.end());
    second.insert(second.end(), contracted_in_b.begin(), contracted_in_b.end());
    if (isIdentity(first) || !isIdentity(second)) {
      emit(a, dy, {a_free, dy_a, dims.lhs_batch, dy_batch}, first, GemmOperand::kRhs);
    } else {
      emit(dy, a, {dy_a, a_free, dy_batch, dims.lhs_batch}, second, GemmOperand::kRhs);
    }
  }
}

// add, sub, mul, div, max.
void Autodiff::arithmeticGrad(Node* node, Node* dy) {
  Node* a = node->operand(0);
  Node* b = node->operand(1);
  switch (node->op()) {
    case Op::kAdd:
      accumulate(a, dy);
      accumulate(b, dy);
      return;
    case Op::kSub:
      accumulate(a, dy);
      if (needs_grad_.count(b)) accumulate(b, b_.unary(Op::kNeg, dy));
      return;
    case Op::kMul:
      if (needs_grad_.count(a)) accumulate(a, b_.mul(dy, b));
      if (needs_grad_.count(b)) accumulate(b, b_.mul(dy, a));
      return;
    case Op::kDiv:  // y = a / b: da = dy / b, db = -dy * y / b
      if (needs_grad_.count(a)) accumulate(a, b_.div(dy, b));
      if (needs_grad_.count(b)) accumulate(b, b_.unary(Op::kNeg, b_.div(b_.mul(dy, node), b)));
      return;
    case Op::kMax: {  // ties send the gradient to the lhs
      Node* mask = b_.ge(a, b);
      Node* da = b_.mul(dy, mask);
      accumulate(a, da);
      if (needs_grad_.count(b)) accumulate(b, b_.sub(dy, da));
      return;
    }
    default: notInFamily(node, "arithmetic");
  }
}

// The unary functions, written with the result y where that is shorter; the activations
// have fused gradient ops.
void Autodiff::unaryGrad(Node* node, Node* dy) {
  Node* x = node->operand(0);
  switch (node->op()) {
    case Op::kNeg: accumulate(x, b_.unary(Op::kNeg, dy)); return;
    case Op::kExp: accumulate(x, b_.mul(dy, node)); return;
    case Op::kLog: accumulate(x, b_.div(dy, x)); return;
    case Op::kRsqrt: {  // y = x^-1/2: dx = -1/2 dy y^3
      Node* y3 = b_.mul(b_.mul(node, node), node);
      accumulate(x, b_.scale(b_.mul(dy, y3), -0.5));
      return;
    }
    case Op::kTanh:  // dx = dy (1 - y^2)
      accumulate(x, b_.sub(dy, b_.mul(dy, b_.mul(node, node))));
      return;
    case Op::kRelu: accumulate(x, b_.create(Op::kReluGrad, {x, dy}, {})); return;
    case Op::kGelu: accumulate(x, b_.create(Op::kGeluGrad, {x, dy}, {})); return;
    case Op::kSilu: accumulate(x, b_.create(Op::kSiluGrad, {x, dy}, {})); return;
    case Op::kGeluErf: accumulate(x, b_.create(Op::kGeluErfGrad, {x, dy}, {})); return;
    case Op::kSqrt:  // dx = dy / (2 y)
      accumulate(x, b_.div(b_.scale(dy, 0.5), node));
      return;
    case Op::kSigmoid:  // dx = dy (y - y^2)
      accumulate(x, b_.mul(dy, b_.sub(node, b_.mul(node, node))));
      return;
    case Op::kErf: {  // dx = dy 2/sqrt(pi) exp(-x^2)
      Node* bump = b_.unary(Op::kExp, b_.unary(Op::kNeg, b_.mul(x, x)));
      accumulate(x, b_.scale(b_.mul(dy, bump), 2.0 / std::sqrt(std::numbers::pi)));
      return;
    }
    default: notInFamily(node, "unary");
  }
}

// The condition is piecewise constant: no gradient; a and b get dy where they were chosen.
void Autodiff::selectGrad(Node* node, Node* dy) {
  Node* cond = node->operand(0);
  Node* a = node->operand(1);
  Node* b = node->operand(2);
  if (!needs_grad_.count(a) && !needs_grad_.count(b)) return;
  Node* zero = b_.constant(0.0, dy->type());
  if (needs_grad_.count(a)) accumulate(a, b_.select(cond, dy, zero));
  if (needs_grad_.count(b)) accumulate(b, b_.select(cond, zero, dy));
}

// Layout ops move elements: the gradient moves them back (a slice's is a pad, a
// broadcast's a sum over the repeated dims).
void Autodiff::layoutGrad(Node* node, Node* dy) {
  Node* x = node->operand(0);
  switch (node->op()) {
    case Op::kConvert: accumulate(x, b_.convert(dy, x->dtype())); return;
    case Op::kTranspose:
      accumulate(x, b_.transpose(dy, inversePerm(node->attrs().getInts(AttrKey::kPerm))));
      return;
    case Op::kReshape: accumulate(x, b_.reshape(dy, x->shape())); return;
    case Op::kSlice: {  // zeros where the slice dropped elements
      const auto& starts = node->attrs().getInts(AttrKey::kStarts);
      const auto& limits = node->attrs().getInts(AttrKey::kLimits);
      std::vector<int64_t> high;
      for (int d = 0; d < x->shape().rank(); ++d) high.push_back(x->shape().dim(d) - limits[static_cast<size_t>(d)]);
      accumulate(x, b_.pad(dy, starts, std::move(high)));
      return;
    }
    case Op::kPad: {
      const auto& low = node->attrs().getInts(AttrKey::kLow);
      std::vector<int64_t> limits;
      for (int d = 0; d < x->shape().rank(); ++d) limits.push_back(low[static_cast<size_t>(d)] + x->shape().dim(d));
      accumulate(x, b_.slice(dy, low, std::move(limits)));
      return;
    }
    case Op::kConcat: concatGrad(node, dy); return;
    case Op::kBroadcast: {
      const auto& kept = node->attrs().getInts(AttrKey::kDims);
      std::vector<int64_t> axes;
      for (int64_t d = 0; d < node->shape().rank(); ++d)
        if (std::find(kept.begin(), kept.end(), d) == kept.end()) axes.push_back(d);
      accumulate(x, axes.empty() ? dy : b_.reduce(Op::kReduceSum, dy, axes));
      return;
    }
    default: notInFamily(node, "layout");
  }
}

// Each operand of a concat gets its part of dy.
void Autodiff::concatGrad(Node* node, Node* dy) {
  Node* a = node->operand(0);
  Node* b = node->operand(1);
  const size_t axis = static_cast<size_t>(node->attrs().getInt(AttrKey::kAxis));
  const int64_t split = a->shape().dim(static_cast<int>(axis));
  std::vector<int64_t> zeros(static_cast<size_t>(node->shape().rank()), 0);
  std::vector<int64_t> ends(dy->shape().dims().begin(), dy->shape().dims().end());
  if (needs_grad_.count(a)) {
    std::vector<int64_t> limits = ends;
    limits[axis] = split;
    accumulate(a, b_.slice(dy, zeros, std::move(limits)));
  }
  if (needs_grad_.count(b)) {
    std::vector<int64_t> starts = zeros;
    starts[axis] = split;
    accumulate(b, b_.slice(dy, std::move(starts), ends));
  }
}

// dy spread back over the reduced dims: as is for a sum, divided by their count for a
// mean, and to every element equal to the max for a max.
void Autodiff::reduceGrad(Node* node, Node* dy) {
  Node* x = node->operand(0);
  const auto& axes = node->attrs().getInts(AttrKey::kAxes);
  std::vector<int64_t> kept;
  int64_t count = 1;
  for (int64_t d = 0; d < x->shape().rank(); ++d) {
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) kept.push_back(d);
    else count *= x->shape().dim(static_cast<int>(d));
  }
  Node* spread = b_.broadcast(dy, x->shape(), kept);
  switch (node->op()) {
    case Op::kReduceSum: accumulate(x, spread); return;
    case Op::kReduceMean: accumulate(x, b_.scale(spread, 1.0 / static_cast<double>(count))); return;
    case Op::kReduceMax: {
      Node* mask = b_.ge(x, b_.broadcast(node, x->shape(), kept));
      accumulate(x, b_.mul(spread, mask));
      return;
    }
    default: notInFamily(node, "reduction");
  }
}

// Every op of ops.def names its gradient here; there is no default, so an op left out is
// a compiler warning (-Wswitch) and, at run time, the error at the end.
void Autodiff::backprop(Node* node, Node* dy) {
  auto op0 = [&] { return node->operand(0); };
  auto op1 = [&] { return node->operand(1); };
  switch (node->op()) {
    case Op::kParameter: case Op::kInput: case Op::kConstant:
    case Op::kGe:  // piecewise constant: zero gradient
      return;
    case Op::kAdd: case Op::kSub: case Op::kMul: case Op::kDiv: case Op::kMax:
      return arithmeticGrad(node, dy);
    case Op::kNeg: case Op::kExp: case Op::kLog: case Op::kRsqrt: case Op::kTanh: case Op::kRelu:
    case Op::kGelu: case Op::kSilu: case Op::kGeluErf: case Op::kSqrt: case Op::kSigmoid: case Op::kErf:
      return unaryGrad(node, dy);
    case Op::kSelect: return selectGrad(node, dy);
    case Op::kSwiglu:  // each operand's gradient in one pass over (gate, up, dy)
      for (GemmOperand wrt : {GemmOperand::kLhs, GemmOperand::kRhs}) {
        Node* operand = node->operand(wrt == GemmOperand::kLhs ? 0 : 1);
        if (!needs_grad_.count(operand)) continue;
        Attrs attrs;
        attrs.set(AttrKey::kWrt, wrt);
        accumulate(operand, b_.create(Op::kSwigluGrad, {op0(), op1(), dy}, std::move(attrs)));
      }
      return;
    case Op::kConvert: case Op::kTranspose: case Op::kReshape: case Op::kSlice: case Op::kPad:
    case Op::kConcat: case Op::kBroadcast:
      return layoutGrad(node, dy);
    case Op::kReduceSum: case Op::kReduceMean: case Op::kReduceMax:
      return reduceGrad(node, dy);
    case Op::kSoftmax: {  // the gradient takes the softmax's scale and causal mask with it
      Attrs prologue;
      for (AttrKey key : {AttrKey::kScale, AttrKey::kCausal})
        if (node->attrs().has(key)) prologue.set(key, node->attrs().getFloat(key));
      accumulate(op0(), b_.create(Op::kSoftmaxGrad, {node, dy}, std::move(prologue)));
      return;
    }
    case Op::kCausalMask: accumulate(op0(), b_.causalMask(dy, 0.0)); return;
    case Op::kRope: {  // a rotation is orthogonal: its gradient is the rotation back
      const Attrs& a = node->attrs();
      accumulate(op0(), b_.rope(dy, a.getFloat(AttrKey::kTheta), inverseOf(a.getRotation(AttrKey::kRotation))));
      return;
    }
    case Op::kRmsNorm: case Op::kLayerNorm: {
      Op grad = node->op() == Op::kRmsNorm ? Op::kRmsNormGrad : Op::kLayerNormGrad;
      accumulate(op0(), b_.normGrad(grad, op0(), dy, node->attrs().getFloat(AttrKey::kEps)));
      return;
    }
    case Op::kGather: accumulate(op0(), b_.scatterAdd(dy, op1(), op0()->shape())); return;
    case Op::kScatterAdd: accumulate(op0(), b_.gather(dy, op1())); return;
    case Op::kCrossEntropy: accumulate(op0(), b_.crossEntropyGrad(op0(), op1(), dy)); return;
    case Op::kMatMul: matmulGrad(node, dy); return;
    case Op::kReluGrad: case Op::kGeluGrad: case Op::kSiluGrad: case Op::kGeluErfGrad: case Op::kSwigluGrad:
    case Op::kSoftmaxGrad: case Op::kRmsNormGrad: case Op::kLayerNormGrad: case Op::kCrossEntropyGrad:
      throw Error(fmt::format("autodiff: no gradient rule for {} (%{}); second derivatives are not "
                              "supported",
                              opName(node->op()), node->name()));
    // Quantization ops are inserted after autodiff (stage iii) and statistics nodes
    // observe values without feeding the loss: a graph reaching them here is misbuilt.
    case Op::kQuantStats: case Op::kErrorStats: case Op::kSmoothScales: case Op::kQuantParams: case Op::kQuantize:
    case Op::kFakeQuant: case Op::kQMatMul:
      break;
    // Collectives are inserted after autodiff too, by the partitioning passes.
    case Op::kAllReduce: case Op::kAllGather: case Op::kReduceScatter: case Op::kShard:
      throw Error(fmt::format("autodiff: no gradient rule for {} (%{}): differentiate the graph before "
                              "partition_spmd and data_parallel insert collectives",
                              opName(node->op()), node->name()));
  }
  throw Error(fmt::format("autodiff: no gradient rule for {} (%{}): differentiate the graph before "
                          "quantization passes rewrite it",
                          opName(node->op()), node->name()));
}

std::vector<Node*> Autodiff::run(Node* loss, std::span<Node* const> params) {
  if (!(loss->type() == TensorType{DType::kF32, Shape()}))
    throw Error(fmt::format("autodiff: the loss %{} must be a scalar f32[], got {}", loss->name(),
                            loss->type().toString()));
  // A node needs a gradient when it depends on a parameter and the loss depends on it.
  std::vector<Node*> order = graph_.postOrder();
  std::unordered_set<const Node*> from_params(params.begin(), params.end());
  for (Node* node : order)
    for (Node* operand : node->operands())
      if (from_params.count(operand) && isFloat(node->dtype())) from_params.insert(node);
  std::unordered_set<const Node*> to_loss{loss};
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    if (to_loss.count(*it))
      for (Node* operand : (*it)->operands()) to_loss.insert(operand);
  for (Node* node : order)
    if (from_params.count(node) && to_loss.count(node)) needs_grad_.insert(node);

  // Every forward GEMM gets an id, so that the GEMMs of its gradient can name it.
  int64_t next_gemm_id = 0;
  for (Node* node : order)
    if (node->attrs().has(AttrKey::kGemmId))
      next_gemm_id = std::max(next_gemm_id, node->attrs().getInt(AttrKey::kGemmId) + 1);
  for (Node* node : order)
    if (node->op() == Op::kMatMul && !node->attrs().has(AttrKey::kGemmId))
      node->attrs().set(AttrKey::kGemmId, next_gemm_id++);

  Node* seed = b_.constant(1.0, loss->type(), gradName(loss));
  adjoint_[loss] = seed;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = *it;
    auto adj = adjoint_.find(node);
    if (adj == adjoint_.end() || (!needs_grad_.count(node) && node != loss)) continue;
    backprop(node, adj->second);
  }

  std::vector<Node*> grads;
  for (Node* p : params) {
    auto it = adjoint_.find(p);
    Node* g;
    if (it != adjoint_.end()) {
      g = it->second;
    } else {
      Node* zero = b_.constant(0.0, {p->dtype(), Shape()});
      g = b_.broadcast(zero, p->shape(), {}, gradName(p));
    }
    // A gradient is laid out like its parameter: the tensor-parallel partitioner then
    // computes each device's part of it (a gradient with no split of its own, such as
    // one summed from a whole scatter and a split GEMM, would otherwise stay whole).
    if (p->attrs().has(AttrKey::kSplit) && p->attrs().getInts(AttrKey::kSplit)[1] > 1 &&
        !g->attrs().has(AttrKey::kSplit))
      g->attrs().set(AttrKey::kSplit, p->attrs().getInts(AttrKey::kSplit));
    grads.push_back(g);
  }
  std::vector<Node*> outputs{loss};
  outputs.insert(outputs.end(), grads.begin(), grads.end());
  graph_.setOutputs(outputs);
  return grads;
}

}  // namespace

std::vector<Node*> appendBackward(Graph& graph, Node* loss, std::span<Node* const> params) {
  return Autodiff(graph).run(loss, params);
}

}  // namespace pgq
