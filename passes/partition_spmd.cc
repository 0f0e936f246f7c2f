#include "passes/partition_spmd.h"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "ir/builder.h"
#include "ir/dot_dims.h"
#include "passes/propagate_sharding.h"
#include "support/errors.h"

namespace pgq {
namespace {

// Where a value lives on a device. kLocal: computed from local parts with no global
// meaning (quantization scales, statistics): read as it is, never converted.
enum class Kind { kReplicated, kSplit, kPartial, kLocal };

struct Layout {
  Kind kind = Kind::kReplicated;
  int64_t dim = 0;
  bool operator==(const Layout&) const = default;
  auto key() const { return std::pair(static_cast<int>(kind), dim); }
};

constexpr Layout kReplicated{};
constexpr Layout kPartial{Kind::kPartial, 0};
constexpr Layout kLocal{Kind::kLocal, 0};
Layout splitAlong(int64_t dim) { return {Kind::kSplit, dim}; }

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }
int64_t indexIn(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) - v.begin(); }

bool isLocalOp(Op op) {
  return op == Op::kQuantStats || op == Op::kErrorStats || op == Op::kQuantParams || op == Op::kSmoothScales;
}

// Ops whose result moves an operand's dims somewhere else: an operand's split follows
// from the result's through the op (propagate_sharding's rules), not by equality.
bool isLayoutOp(Op op) {
  switch (op) {
    case Op::kTranspose: case Op::kReshape: case Op::kBroadcast: case Op::kSlice: case Op::kPad:
    case Op::kReduceSum: case Op::kReduceMax: case Op::kReduceMean: case Op::kGather: case Op::kScatterAdd:
      return true;
    default:
      return false;
  }
}

class Partitioner {
 public:
  Partitioner(const Graph& in, int64_t devices)
      : in_(in), t_(devices), out_(std::make_unique<Graph>(in.name())), b_(*out_) {
    for (const Node* n : in.nodes()) old_names_.insert(n->name());
  }

  std::unique_ptr<Graph> run() {
    for (const Node* n : in_.postOrder()) copy(*n);
    std::vector<Node*> outputs;
    for (const Node* o : in_.outputs()) {
      // An output in its annotated layout (a gradient in its parameter's), reduced when
      // partial.
      Layout l = layout_.at(o);
      Layout want = annotated(*o);
      if (l.kind == Kind::kLocal) want = kLocal;
      outputs.push_back(convert(o, want));
    }
    out_->setOutputs(std::move(outputs));
    return std::move(out_);
  }

 private:
  Layout annotated(const Node& n) const {
    std::optional<ValueSplit> s = valueSplit(n);
    return s && s->devices > 1 ? splitAlong(s->dim) : kReplicated;
  }

  // The shape of `n`'s value as a device holds it in layout `l`.
  Shape localShape(const Node& n, Layout l) const {
    if (l.kind != Kind::kSplit) return n.shape();
    std::vector<int64_t> dims(n.shape().dims().begin(), n.shape().dims().end());
    int64_t& d = dims.at(static_cast<size_t>(l.dim));
    if (d % t_ != 0)
      throw Error(fmt::format("partition_spmd: %{} {} is split along dim {} over {} devices, which does not "
                              "divide it",
                              n.name(), n.type().toString(), l.dim, t_));
    d /= t_;
    return Shape(std::move(dims));
  }

  std::string freshName(const std::string& base) {
    std::string name = base;
    for (int i = 1; old_names_.count(name) || out_->find(name); ++i) name = fmt::format("{}.{}", base, i);
    return name;
  }

  // The copy of old value `v` in layout `to`, inserting the collective that moves it
  // there (once per value and layout).
  Node* convert(const Node* v, Layout to) {
    Layout from = layout_.at(v);
    Node* value = new_.at(v);
    if (from == to) return value;
    auto key = std::pair(v, to.key());
    if (auto it = converted_.find(key); it != converted_.end()) return it->second;
    PGQ_ASSERT(from.kind != Kind::kLocal && to.kind != Kind::kLocal && to.kind != Kind::kPartial,
               "partition_spmd: %{} cannot move from layout {} to {}", v->name(), static_cast<int>(from.kind),
               static_cast<int>(to.kind));
    const std::string base = v->name();
    Node* result = nullptr;
    if (from.kind == Kind::kPartial) {
      result = to.kind == Kind::kReplicated
                   ? b_.allReduce(value, DeviceGroup::kTensor, Reduction::kSum, freshName(base + ".all_reduce"))
                   : b_.collective(Op::kReduceScatter, value, DeviceGroup::kTensor, to.dim, t_,
                                   freshName(base + ".reduce_scatter"));
    } else if (from.kind == Kind::kReplicated) {
      if (v->op() == Op::kConstant) {  // a splat: every part holds the same value
        result = b_.create(Op::kConstant, {}, value->attrs(), TensorType{v->dtype(), localShape(*v, to)},
                           freshName(base + ".part"));
      } else {
        result = b_.collective(Op::kShard, value, DeviceGroup::kTensor, to.dim, t_, freshName(base + ".shard"));
      }
    } else {  // split
      result = b_.collective(Op::kAllGather, value, DeviceGroup::kTensor, from.dim, t_,
                             freshName(base + ".all_gather"));
      if (to.kind == Kind::kSplit)
        result = b_.collective(Op::kShard, result, DeviceGroup::kTensor, to.dim, t_, freshName(base + ".shard"));
    }
    converted_.emplace(key, result);
    return result;
  }

  // A GEMM's layout, and the layouts it needs of its operands.
  Layout gemm(const Node& n, std::vector<Layout>& want) {
    DotDims dims = DotDims::fromAttrs(n.attrs());
    const Node* lhs = n.operand(0);
    const Node* rhs = n.operand(1);
    for (int i : {0, 1})
      if (layout_.at(n.operand(i)).kind == Kind::kPartial) want[static_cast<size_t>(i)] = kReplicated;
    Layout lo = want[0], ro = want[1];
    Layout result = annotated(n);
    const auto nb = static_cast<int64_t>(dims.lhs_batch.size());
    if (result.kind == Kind::kSplit) {
      if (result.dim < nb) {  // a batch dim (attention heads): both operands split along it
        want[0] = splitAlong(dims.lhs_batch[static_cast<size_t>(result.dim)]);
        want[1] = splitAlong(dims.rhs_batch[static_cast<size_t>(result.dim)]);
      } else {  // a free dim of one operand, split (sliced if whole); the other whole
        const std::vector<int64_t> lhs_free = dims.lhsFree(lhs->shape().rank());
        const std::vector<int64_t> rhs_free = dims.rhsFree(rhs->shape().rank());
        const auto nl = static_cast<int64_t>(lhs_free.size());
        const bool from_lhs = result.dim < nb + nl;
        const int64_t dim = from_lhs ? lhs_free[static_cast<size_t>(result.dim - nb)]
                                     : rhs_free[static_cast<size_t>(result.dim - nb - nl)];
        want[from_lhs ? 0 : 1] = splitAlong(dim);
        if (from_lhs && ro.kind == Kind::kSplit) want[1] = kReplicated;
        if (!from_lhs && lo.kind == Kind::kSplit) want[0] = kReplicated;
      }
      return result;
    }
    // Contracting over a split dim leaves partial sums.
    auto contractPosition = [](Layout l, const std::vector<int64_t>& contract) -> std::optional<size_t> {
      if (l.kind != Kind::kSplit || !contains(contract, l.dim)) return std::nullopt;
      return static_cast<size_t>(indexIn(contract, l.dim));
    };
    std::optional<size_t> lc = contractPosition(lo, dims.lhs_contract);
    std::optional<size_t> rc = contractPosition(ro, dims.rhs_contract);
    if (lc || rc) {
      size_t i = lc ? *lc : *rc;
      Layout lhs_want = splitAlong(dims.lhs_contract[i]), rhs_want = splitAlong(dims.rhs_contract[i]);
      // The other operand is sliced along the matching dim when it is whole, gathered
      // and sliced when split elsewhere.
      want[0] = lhs_want;
      want[1] = rhs_want;
      return kPartial;
    }
    for (size_t i = 0; i < 2; ++i)
      if (want[i].kind == Kind::kSplit) want[i] = kReplicated;
    return kReplicated;
  }

  // Partial values pass through ops linear in them; returns whether `n` is one such use.
  bool linearInPartial(const Node& n, const std::vector<Layout>& in) const {
    auto partial = [&](size_t i) { return in[i].kind == Kind::kPartial; };
    auto whole = [&](size_t i) { return in[i].kind == Kind::kReplicated; };
    if (annotated(n).kind != Kind::kReplicated) return false;
    switch (n.op()) {
      case Op::kAdd: case Op::kSub: return partial(0) && partial(1);
      case Op::kMul: return (partial(0) && whole(1)) || (whole(0) && partial(1));
      case Op::kDiv: return partial(0) && whole(1);
      case Op::kNeg: case Op::kReshape: case Op::kTranspose: case Op::kBroadcast: case Op::kReduceSum:
      case Op::kConvert:
        return partial(0);
      default:
        return false;
    }
  }

  void copy(const Node& n) {
    const int arity = n.numOperands();
    std::vector<Layout> in;
    for (int i = 0; i < arity; ++i) in.push_back(layout_.at(n.operand(i)));
    std::vector<Layout> want = in;
    Layout l;
    if (arity == 0) {
      l = annotated(n);
    } else if (isLocalOp(n.op())) {
      for (Layout& w : want)
        if (w.kind == Kind::kPartial) w = kReplicated;
      // error_stats compares its two operands element by element: the same part of each.
      if (n.op() == Op::kErrorStats && want[0] != want[1]) want = {kReplicated, kReplicated};
      l = kLocal;
    } else if (linearInPartial(n, in)) {
      l = kPartial;
    } else if (n.op() == Op::kMatMul || n.op() == Op::kQMatMul) {
      l = gemm(n, want);
    } else if (isLayoutOp(n.op())) {
      l = annotated(n);
      // Split only when the split comes from its data operand (propagate_sharding's
      // rules); a split asked for otherwise (a gradient laid out like its parameter,
      // scattered from whole rows) is computed whole and sliced where it is read.
      if (l.kind == Kind::kSplit && in[0].kind != Kind::kSplit) l = kReplicated;
      for (int i = 0; i < arity; ++i) {
        Layout& w = want[static_cast<size_t>(i)];
        if (w.kind == Kind::kPartial || (w.kind == Kind::kSplit && l.kind != Kind::kSplit)) w = kReplicated;
      }
    } else {
      // Elementwise and row-wise ops: operands shaped like the result take its layout
      // (concat's differ along the joined axis only); the rest (targets, scalars) whole.
      l = annotated(n);
      for (int i = 0; i < arity; ++i) {
        const Node* o = n.operand(i);
        Layout& w = want[static_cast<size_t>(i)];
        if (w.kind == Kind::kLocal) continue;
        const bool shaped = n.op() == Op::kConcat ? o->shape().rank() == n.shape().rank() : o->shape() == n.shape();
        w = shaped ? l : kReplicated;
      }
    }

    std::vector<Node*> operands;
    for (int i = 0; i < arity; ++i)
      operands.push_back(want[static_cast<size_t>(i)] == in[static_cast<size_t>(i)]
                             ? new_.at(n.operand(i))
                             : convert(n.operand(i), want[static_cast<size_t>(i)]));
    Attrs attrs = n.attrs();
    if (n.op() == Op::kSlice && l.kind == Kind::kSplit) {
      std::vector<int64_t> limits = attrs.getInts(AttrKey::kLimits);
      limits[static_cast<size_t>(l.dim)] = localShape(n, l).dim(static_cast<int>(l.dim));
      attrs.set(AttrKey::kLimits, std::move(limits));
    }
    std::optional<TensorType> type;
    if (opTypeRule(n.op()) == TypeRule::kDeclared) type = TensorType{n.dtype(), localShape(n, l)};
    Node* copy = b_.create(n.op(), std::move(operands), std::move(attrs), type, n.name());
    if (l.kind != Kind::kLocal && copy->shape() != localShape(n, l))
      throw InternalError(fmt::format("partition_spmd: %{} has local shape {}, expected {}", n.name(),
                                      copy->shape().toString(), localShape(n, l).toString()));
    new_[&n] = copy;
    layout_[&n] = l;
  }

  const Graph& in_;
  const int64_t t_;
  std::unique_ptr<Graph> out_;
  Builder b_;
  std::unordered_set<std::string> old_names_;
  std::unordered_map<const Node*, Node*> new_;
  std::unordered_map<const Node*, Layout> layout_;
  std::map<std::pair<const Node*, std::pair<int, int64_t>>, Node*> converted_;
};

}  // namespace

int64_t tensorParallelDevices(const Graph& graph) {
  int64_t devices = 1;
  const Node* first = nullptr;
  for (const Node* n : graph.nodes()) {
    std::optional<ValueSplit> s = valueSplit(*n);
    if (!s || s->devices == 1) continue;
    if (first && s->devices != devices)
      throw Error(fmt::format("partition_spmd: %{} is split over {} devices but %{} over {}; a graph is "
                              "partitioned over one device count",
                              n->name(), s->devices, first->name(), devices));
    devices = s->devices;
    first = n;
  }
  return devices;
}

bool PartitionSpmd::run(Graph& graph, PassContext&) {
  const int64_t devices = tensorParallelDevices(graph);
  if (devices == 1) return false;
  std::unique_ptr<Graph> partitioned = Partitioner(graph, devices).run();
  graph = std::move(*partitioned);
  return true;
}

}  // namespace pgq
