#include "passes/propagate_sharding.h"

#include <algorithm>
#include <vector>

#include "ir/dot_dims.h"

namespace pgq {
namespace {

using Split = std::optional<ValueSplit>;

bool contains(const std::vector<int64_t>& dims, int64_t d) { return std::find(dims.begin(), dims.end(), d) != dims.end(); }

int64_t positionOf(const std::vector<int64_t>& dims, int64_t d) {
  return std::find(dims.begin(), dims.end(), d) - dims.begin();
}

// The one split `candidates` agree on; none when they disagree.
Split agreed(const std::vector<Split>& candidates) {
  Split out;
  for (const Split& s : candidates) {
    if (!s) continue;
    if (out && !(*out == *s)) return std::nullopt;
    out = s;
  }
  return out;
}

// Elementwise over operands of the result's shape (scalars and other shapes, such as
// the targets of a loss, do not constrain it).
Split elementwise(const Node& node) {
  std::vector<Split> candidates;
  for (const Node* operand : node.operands())
    if (operand->shape() == node.shape()) candidates.push_back(valueSplit(*operand));
  return agreed(candidates);
}

// As elementwise, for ops that work across their last `trailing` dims: a split of one
// of those would need the other devices' parts.
Split keepUnlessTrailing(const Node& node, int trailing) {
  Split s = elementwise(node);
  if (s && s->dim >= node.shape().rank() - trailing) return std::nullopt;
  return s;
}

// The result dim of a reshape from `in` to `out` that holds the outermost part of operand
// dim `d`: it starts at the same flat position and nests with it (one size divides the
// other), as [N,D] -> [B,T,H,Dh] makes D's split a split of H.
Split reshaped(const Shape& in, const Shape& out, ValueSplit s) {
  int64_t before = 1;
  for (int i = 0; i < s.dim; ++i) before *= in.dim(i);
  int64_t size = in.dim(static_cast<int>(s.dim));
  int64_t prefix = 1;
  for (int j = 0; j < out.rank() && prefix <= before; ++j) {
    int64_t o = out.dim(j);
    if (prefix == before && (o > 1 || size == 1) && o > 0 && size > 0 && (o % size == 0 || size % o == 0))
      return ValueSplit{j, s.devices};
    prefix *= o;
  }
  return std::nullopt;
}

// Result dims of a GEMM: batch dims, then lhs free dims, then rhs free dims. A split
// free dim or batch dim of an operand becomes the result dim it lands in; a split
// contracting dim leaves each device a partial sum of the whole result.
Split gemm(const Node& node) {
  DotDims dims = DotDims::fromAttrs(node.attrs());
  const Node& lhs = *node.operand(0);
  const Node& rhs = *node.operand(1);
  std::vector<int64_t> lhs_free = dims.lhsFree(lhs.shape().rank());
  std::vector<int64_t> rhs_free = dims.rhsFree(rhs.shape().rank());
  const int64_t nb = static_cast<int64_t>(dims.lhs_batch.size());
  const int64_t nl = static_cast<int64_t>(lhs_free.size());
  std::vector<Split> candidates;
  auto add = [&](const Node& operand, const std::vector<int64_t>& contract, const std::vector<int64_t>& batch,
                 const std::vector<int64_t>& free, int64_t free_offset) {
    Split s = valueSplit(operand);
    if (!s) return true;
    if (contains(contract, s->dim)) return false;
    int64_t dim = contains(batch, s->dim) ? positionOf(batch, s->dim) : free_offset + positionOf(free, s->dim);
    candidates.push_back(ValueSplit{dim, s->devices});
    return true;
  };
  if (!add(lhs, dims.lhs_contract, dims.lhs_batch, lhs_free, nb) ||
      !add(rhs, dims.rhs_contract, dims.rhs_batch, rhs_free, nb + nl))
    return std::nullopt;
  return agreed(candidates);
}

Split propagate(const Node& node) {
  auto operandSplit = [&](int i) { return valueSplit(*node.operand(i)); };
  switch (node.op()) {
    case Op::kAdd: case Op::kSub: case Op::kMul: case Op::kDiv: case Op::kMax: case Op::kGe:
    case Op::kNeg: case Op::kExp: case Op::kLog: case Op::kRsqrt: case Op::kTanh: case Op::kRelu:
    case Op::kGelu: case Op::kSqrt: case Op::kSigmoid: case Op::kErf: case Op::kSilu: case Op::kGeluErf:
    case Op::kReluGrad: case Op::kGeluGrad: case Op::kSiluGrad: case Op::kGeluErfGrad: case Op::kSelect:
    case Op::kSwiglu: case Op::kSwigluGrad:
    case Op::kConvert: case Op::kQuantize: case Op::kFakeQuant:
      return elementwise(node);
    case Op::kSoftmax: case Op::kSoftmaxGrad:  // a causal mask depends on the positions too
      return keepUnlessTrailing(node, node.attrs().has(AttrKey::kCausal) ? 2 : 1);
    case Op::kRmsNorm: case Op::kRmsNormGrad: case Op::kLayerNorm:
    case Op::kLayerNormGrad: case Op::kCrossEntropyGrad:
      return keepUnlessTrailing(node, 1);
    case Op::kCausalMask: case Op::kRope:  // rope's angles depend on the position (dim 2)
      return keepUnlessTrailing(node, 2);
    case Op::kTranspose: {
      Split s = operandSplit(0);
      if (!s) return s;
      const std::vector<int64_t>& perm = node.attrs().getInts(AttrKey::kPerm);
      return ValueSplit{positionOf(perm, s->dim), s->devices};
    }
    case Op::kReshape: {
      Split s = operandSplit(0);
      return s ? reshaped(node.operand(0)->shape(), node.shape(), *s) : s;
    }
    case Op::kSlice: case Op::kPad: {  // kept along a dim the op leaves whole
      Split s = operandSplit(0);
      return s && node.shape().dim(static_cast<int>(s->dim)) == node.operand(0)->shape().dim(static_cast<int>(s->dim))
                 ? s
                 : std::nullopt;
    }
    case Op::kConcat: {  // kept along any dim but the one the parts are joined on
      Split s = agreed({operandSplit(0), operandSplit(1)});
      return s && s->dim != node.attrs().getInt(AttrKey::kAxis) ? s : std::nullopt;
    }
    case Op::kBroadcast: {
      Split s = operandSplit(0);
      if (!s) return s;
      return ValueSplit{node.attrs().getInts(AttrKey::kDims)[static_cast<size_t>(s->dim)], s->devices};
    }
    case Op::kReduceSum: case Op::kReduceMax: case Op::kReduceMean: {
      Split s = operandSplit(0);
      const std::vector<int64_t>& axes = node.attrs().getInts(AttrKey::kAxes);
      if (!s || contains(axes, s->dim)) return std::nullopt;
      int64_t before = std::count_if(axes.begin(), axes.end(), [&](int64_t a) { return a < s->dim; });
      return ValueSplit{s->dim - before, s->devices};
    }
    case Op::kGather: {  // (table [V,D], indices [...]) -> [..., D]
      Split table = operandSplit(0), indices = operandSplit(1);
      std::vector<Split> candidates{indices};
      if (table && table->dim == 1) candidates.push_back(ValueSplit{node.shape().rank() - 1, table->devices});
      return table && table->dim == 0 ? std::nullopt : agreed(candidates);
    }
    case Op::kScatterAdd: {  // (dy [..., D], indices) -> [V,D]
      Split dy = operandSplit(0);
      if (dy && dy->dim == node.operand(0)->shape().rank() - 1) return ValueSplit{1, dy->devices};
      return std::nullopt;
    }
    case Op::kMatMul: case Op::kQMatMul:
      return gemm(node);
    case Op::kAllReduce:
      return operandSplit(0);
    case Op::kShard:
      return ValueSplit{node.attrs().getInt(AttrKey::kAxis), node.attrs().getInt(AttrKey::kDevices)};
    case Op::kAllGather: case Op::kReduceScatter:  // inserted by partition_spmd, which sets splits itself
    case Op::kParameter: case Op::kInput: case Op::kConstant: case Op::kCrossEntropy: case Op::kQuantStats:
    case Op::kErrorStats: case Op::kSmoothScales: case Op::kQuantParams:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

std::optional<ValueSplit> valueSplit(const Node& node) {
  if (!node.attrs().has(AttrKey::kSplit)) return std::nullopt;
  const std::vector<int64_t>& split = node.attrs().getInts(AttrKey::kSplit);
  return ValueSplit{split[0], split[1]};
}

bool PropagateSharding::run(Graph& graph, PassContext&) {
  bool changed = false;
  for (Node* node : graph.postOrder()) {
    if (node->attrs().has(AttrKey::kSplit)) continue;
    if (Split s = propagate(*node)) {
      node->attrs().set(AttrKey::kSplit, std::vector<int64_t>{s->dim, s->devices});
      changed = true;
    }
  }
  return changed;
}

}  // namespace pgq
