#include "passes/tag_metadata.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "ir/analysis.h"
#include "ir/dot_dims.h"
#include "passes/propagate_sharding.h"
#include "support/errors.h"

namespace pgq {
namespace {

bool isGemm(const Node& node) { return node.op() == Op::kMatMul || node.op() == Op::kQMatMul; }

// A GEMM of the model: not a copy computed only to be measured (isMeasuredOnly).
bool isModelGemm(const Graph& graph, const Node& node) { return isGemm(node) && !isMeasuredOnly(graph, node); }

bool isGradientOp(Op op) {
  return op == Op::kCrossEntropyGrad || op == Op::kSoftmaxGrad || op == Op::kGeluGrad || op == Op::kReluGrad ||
         op == Op::kSiluGrad || op == Op::kGeluErfGrad || op == Op::kRmsNormGrad || op == Op::kLayerNormGrad ||
         op == Op::kSwigluGrad || op == Op::kScatterAdd;
}

const Node* throughConverts(const Node* node) {
  while (node->op() == Op::kConvert) node = node->operand(0);
  return node;
}

// The forward GEMMs of the graph by id. A rewrite (bf16_gemms) may leave a dead copy
// until dce runs: the live GEMM wins.
std::unordered_map<int64_t, const Node*> forwardGemms(const Graph& graph, const std::vector<Node*>& order) {
  std::unordered_set<const Node*> live = liveNodes(graph);
  std::unordered_map<int64_t, const Node*> by_id;
  for (const Node* node : order) {
    if (!isGemm(*node) || !node->attrs().has(AttrKey::kGemmId) || node->attrs().has(AttrKey::kGradOf)) continue;
    auto [it, inserted] = by_id.try_emplace(node->attrs().getInt(AttrKey::kGemmId), node);
    if (inserted || !live.count(node)) continue;
    if (live.count(it->second))
      throw Error(fmt::format("tag_metadata: matmuls %{} and %{} both have gemm={}", it->second->name(),
                              node->name(), it->first));
    it->second = node;
  }
  return by_id;
}

// The forward GEMM a backward GEMM differentiates (grad_of), or null for a forward GEMM.
const Node* forwardOf(const Node& gemm, const std::unordered_map<int64_t, const Node*>& forward) {
  if (!gemm.attrs().has(AttrKey::kGradOf)) return nullptr;
  auto it = forward.find(gemm.attrs().getInt(AttrKey::kGradOf));
  if (it == forward.end())
    throw Error(fmt::format("tag_metadata: matmul %{} has grad_of={}, but no forward GEMM has that id",
                            gemm.name(), gemm.attrs().getInt(AttrKey::kGradOf)));
  return it->second;
}

// Values computed from the loss gradient: the fused gradient ops, the gradient a
// backward GEMM receives (its operand other than the forward GEMM's operand it
// multiplies by), and everything computed from those.
std::unordered_set<const Node*> gradientValues(const std::vector<Node*>& order,
                                               const std::unordered_map<int64_t, const Node*>& forward) {
  std::unordered_set<const Node*> grads;
  for (const Node* node : order) {
    if (!isGemm(*node)) continue;
    const Node* fwd = forwardOf(*node, forward);
    if (!fwd) continue;
    GemmOperand wrt = node->attrs().getOperand(AttrKey::kWrt);
    const Node* kept = throughConverts(fwd->operand(static_cast<int>(indexOf(otherOperand(wrt)))));
    for (const Node* operand : node->operands())
      if (throughConverts(operand) != kept) grads.insert(operand);
  }
  for (const Node* node : order) {
    bool g = isGradientOp(node->op());
    for (const Node* operand : node->operands()) g = g || grads.count(operand);
    if (g) grads.insert(node);
  }
  return grads;
}

OperandRoles rolesOf(const Node& gemm, const std::unordered_set<const Node*>& grads) {
  OperandRoles roles;
  for (int i = 0; i < 2; ++i) {
    const Node* operand = gemm.operand(i);
    roles[static_cast<size_t>(i)] = isWeightValue(operand) ? OperandRole::kWeight
                                    : grads.count(operand) ? OperandRole::kGradient
                                                           : OperandRole::kActivation;
  }
  return roles;
}

// How a forward GEMM runs tensor-parallel, from the splits of its operands: a weight
// split along its free (output) dim makes it column-parallel, along its contracting
// (input) dim row-parallel; both operands split along the same batch dim split heads.
struct Parallel {
  ShardingKind kind = ShardingKind::kReplicated;
  int64_t devices = 0;  // 0: no split reaches the GEMM
};

Parallel parallelOf(const Node& gemm, const OperandRoles& roles) {
  DotDims dims = DotDims::fromAttrs(gemm.attrs());
  std::optional<ValueSplit> lhs = valueSplit(*gemm.operand(0)), rhs = valueSplit(*gemm.operand(1));
  for (GemmOperand side : {GemmOperand::kLhs, GemmOperand::kRhs}) {
    const std::optional<ValueSplit>& s = side == GemmOperand::kLhs ? lhs : rhs;
    if (roles[indexOf(side)] != OperandRole::kWeight || !s) continue;
    const auto& contract = side == GemmOperand::kLhs ? dims.lhs_contract : dims.rhs_contract;
    const auto& batch = side == GemmOperand::kLhs ? dims.lhs_batch : dims.rhs_batch;
    if (std::find(contract.begin(), contract.end(), s->dim) != contract.end()) return {ShardingKind::kRow, s->devices};
    if (std::find(batch.begin(), batch.end(), s->dim) == batch.end()) return {ShardingKind::kColumn, s->devices};
  }
  if (lhs && rhs && lhs->devices == rhs->devices) {
    auto l = std::find(dims.lhs_batch.begin(), dims.lhs_batch.end(), lhs->dim) - dims.lhs_batch.begin();
    auto r = std::find(dims.rhs_batch.begin(), dims.rhs_batch.end(), rhs->dim) - dims.rhs_batch.begin();
    if (l == r && l < static_cast<std::ptrdiff_t>(dims.lhs_batch.size())) return {ShardingKind::kHeads, lhs->devices};
  }
  return {};
}

// Which of [batch, M, K, N] a tensor-parallel split divides (see the header).
int splitIndex(ShardingKind kind, GemmDirection direction, const OperandRoles& roles) {
  enum { kBatch = 0, kM = 1, kK = 2, kN = 3 };
  auto freeDimOf = [&](OperandRole role) { return roles[0] == role ? kM : kN; };
  switch (kind) {
    case ShardingKind::kHeads: return kBatch;
    case ShardingKind::kColumn:
      if (direction == GemmDirection::kFwd) return kN;
      if (direction == GemmDirection::kBwdDgrad) return kK;
      return freeDimOf(OperandRole::kGradient);
    case ShardingKind::kRow:
      if (direction == GemmDirection::kFwd) return kK;
      if (direction == GemmDirection::kBwdDgrad) return freeDimOf(OperandRole::kWeight);
      return freeDimOf(OperandRole::kActivation);
    case ShardingKind::kReplicated: return -1;
  }
  return -1;
}

// The tensor-parallel degree of the graph: the most devices any value is split over.
// A GEMM no split reaches runs replicated on all of them.
int64_t deviceCount(const std::vector<Node*>& order) {
  int64_t devices = 1;
  for (const Node* node : order)
    if (std::optional<ValueSplit> s = valueSplit(*node)) devices = std::max(devices, s->devices);
  return devices;
}

class Tagger {
 public:
  Tagger(const Graph& graph, const std::vector<Node*>& order)
      : forward_(forwardGemms(graph, order)), grads_(gradientValues(order, forward_)), devices_(deviceCount(order)) {}

  // Tags one GEMM; a backward GEMM after its forward GEMM.
  void tag(Node& node);

 private:
  std::unordered_map<int64_t, const Node*> forward_;
  std::unordered_set<const Node*> grads_;
  int64_t devices_;
  // Forward GEMMs' parallel kinds, which their backward GEMMs share.
  std::unordered_map<const Node*, Parallel> parallel_;
};

void Tagger::tag(Node& node) {
  Attrs& a = node.attrs();
  if (!a.has(AttrKey::kLabel)) a.set(AttrKey::kLabel, node.name());
  const Node* fwd = forwardOf(node, forward_);
  if (!a.has(AttrKey::kRoles)) a.set(AttrKey::kRoles, rolesOf(node, grads_));
  const OperandRoles roles = a.getRoles(AttrKey::kRoles);  // a copy: setting attributes moves them
  if (!a.has(AttrKey::kDirection)) {
    // A backward GEMM computes the gradient of a weight or of an activation.
    GemmDirection d = GemmDirection::kFwd;
    if (fwd) {
      GemmOperand wrt = a.getOperand(AttrKey::kWrt);
      d = fwd->attrs().getRoles(AttrKey::kRoles)[indexOf(wrt)] == OperandRole::kWeight ? GemmDirection::kBwdWgrad
                                                                                       : GemmDirection::kBwdDgrad;
    }
    a.set(AttrKey::kDirection, d);
  }
  const GemmDirection direction = a.getDirection(AttrKey::kDirection);
  if (!a.has(AttrKey::kLayer)) a.set(AttrKey::kLayer, fwd ? fwd->attrs().getInt(AttrKey::kLayer) : int64_t{-1});

  const Node& lhs = *node.operand(0);
  const Node& rhs = *node.operand(1);
  GemmSizes g = gemmSizes(lhs.shape(), rhs.shape(), DotDims::fromAttrs(a));
  std::vector<int64_t> shape{g.batch, g.m, g.k, g.n};
  a.set(AttrKey::kGemmShape, shape);
  a.set(AttrKey::kFlops, static_cast<int64_t>(g.flops()));
  a.set(AttrKey::kBytes, static_cast<int64_t>(lhs.shape().numElements() * dtypeSize(lhs.dtype()) +
                                              rhs.shape().numElements() * dtypeSize(rhs.dtype()) +
                                              node.shape().numElements() * dtypeSize(node.dtype())));

  Parallel p = fwd ? parallel_.at(fwd) : parallelOf(node, roles);
  if (!fwd) parallel_[&node] = p;
  int64_t devices = p.devices > 0 ? p.devices : devices_;
  ShardingKind kind = p.kind;
  int split = splitIndex(kind, direction, roles);
  if (split < 0 || shape[static_cast<size_t>(split)] % devices != 0) {
    kind = ShardingKind::kReplicated;
    split = -1;
  }
  std::vector<int64_t> device = shape;
  if (split >= 0) device[static_cast<size_t>(split)] /= devices;
  a.set(AttrKey::kSharding, kind);
  a.set(AttrKey::kDevices, devices);
  a.set(AttrKey::kDeviceShape, device);
}

}  // namespace

bool TagMetadata::run(Graph& graph, PassContext&) {
  std::vector<Node*> order = graph.postOrder();
  Tagger tagger(graph, order);
  bool changed = false;
  // Forward GEMMs first: a backward GEMM takes its direction, layer and sharding from
  // the forward GEMM it differentiates, which need not come before it in the graph.
  for (bool backward : {false, true})
    for (Node* node : order) {
      if (!isModelGemm(graph, *node) || node->attrs().has(AttrKey::kGradOf) != backward) continue;
      Attrs before = node->attrs();
      tagger.tag(*node);
      changed |= !(before == node->attrs());
    }
  return changed;
}

}  // namespace pgq
