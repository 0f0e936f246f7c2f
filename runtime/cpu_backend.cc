// The CPU backend: maps IR nodes onto oneDNN GEMMs and pgq's kernels. Shapes are
// static, so everything a kernel needs (sizes, layouts, broadcast modes) is worked
// out once here and captured in the returned closure; a run only looks up pointers.
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "ir/dot_dims.h"
#include "ir/quant.h"
#include "kernels/convert.h"
#include "kernels/elementwise.h"
#include "kernels/float_quant.h"
#include "kernels/gemm.h"
#include "kernels/kernel_error.h"
#include "kernels/layout.h"
#include "kernels/norm.h"
#include "kernels/quant_format.h"
#include "kernels/quant_stats.h"
#include "kernels/quantize.h"
#include "kernels/quantize_items.h"
#include "kernels/reduce.h"
#include "kernels/rope.h"
#include "kernels/smooth_quant.h"
#include "kernels/softmax.h"
#include "plan/hardware.h"
#include "runtime/backend.h"
#include "runtime/collectives.h"
#include "runtime/layout_util.h"
#include "support/errors.h"

namespace pgq {
namespace {

namespace k = kernels;

// The kernel of a binary elementwise op; nullopt for every other op.
std::optional<k::BinaryOp> binaryOp(Op op) {
  switch (op) {
    case Op::kAdd: return k::BinaryOp::kAdd;
    case Op::kSub: return k::BinaryOp::kSub;
    case Op::kMul: return k::BinaryOp::kMul;
    case Op::kDiv: return k::BinaryOp::kDiv;
    case Op::kMax: return k::BinaryOp::kMax;
    case Op::kGe: return k::BinaryOp::kGe;
    default: return std::nullopt;
  }
}

// The kernel of a unary elementwise op; nullopt for every other op.
std::optional<k::UnaryOp> unaryOp(Op op) {
  switch (op) {
    case Op::kNeg: return k::UnaryOp::kNeg;
    case Op::kExp: return k::UnaryOp::kExp;
    case Op::kLog: return k::UnaryOp::kLog;
    case Op::kRsqrt: return k::UnaryOp::kRsqrt;
    case Op::kTanh: return k::UnaryOp::kTanh;
    case Op::kRelu: return k::UnaryOp::kRelu;
    case Op::kGelu: return k::UnaryOp::kGelu;
    case Op::kSqrt: return k::UnaryOp::kSqrt;
    case Op::kSigmoid: return k::UnaryOp::kSigmoid;
    case Op::kErf: return k::UnaryOp::kErf;
    case Op::kSilu: return k::UnaryOp::kSilu;
    case Op::kGeluErf: return k::UnaryOp::kGeluErf;
    default: return std::nullopt;
  }
}

// The families of ops the CPU backend runs, each lowered by one function of CpuBackend
// (lower() lists them). familyOf names every op of ops.def once, and supports() and
// lower() both dispatch on it, so they cannot disagree about an op; it has no default,
// so an op left out is a compiler warning (-Wswitch) and an InternalError naming it.
enum class OpFamily {
  kGraphInterface,     // parameter, input, constant
  kElementwise,        // arithmetic, activations and their gradients, select
  kConvert,            // f32 <-> bf16
  kLayout,             // transpose, reshape, broadcast, slice, pad, concat
  kReduction,          // reduce_sum, reduce_max, reduce_mean
  kAttentionAndNorm,   // softmax, causal mask, rope, rms/layer norm, and their gradients
  kEmbeddingAndLoss,   // gather, scatter_add, cross_entropy and its gradient
  kGemm,               // matmul
  kQuantization,       // statistics, scales, quantize, qmatmul
  kCollective,         // all_reduce, all_gather, reduce_scatter, shard
};

OpFamily familyOf(Op op) {
  switch (op) {
    case Op::kParameter: case Op::kInput: case Op::kConstant:
      return OpFamily::kGraphInterface;
    case Op::kAdd: case Op::kSub: case Op::kMul: case Op::kDiv: case Op::kMax: case Op::kGe:
    case Op::kNeg: case Op::kExp: case Op::kLog: case Op::kRsqrt: case Op::kTanh: case Op::kRelu:
    case Op::kGelu: case Op::kSqrt: case Op::kSigmoid: case Op::kErf: case Op::kSilu:
    case Op::kGeluErf: case Op::kReluGrad: case Op::kGeluGrad: case Op::kSiluGrad:
    case Op::kGeluErfGrad: case Op::kSelect: case Op::kSwiglu: case Op::kSwigluGrad:
      return OpFamily::kElementwise;
    case Op::kConvert:
      return OpFamily::kConvert;
    case Op::kTranspose: case Op::kReshape: case Op::kBroadcast: case Op::kSlice: case Op::kPad:
    case Op::kConcat:
      return OpFamily::kLayout;
    case Op::kReduceSum: case Op::kReduceMax: case Op::kReduceMean:
      return OpFamily::kReduction;
    case Op::kSoftmax: case Op::kSoftmaxGrad: case Op::kCausalMask: case Op::kRope:
    case Op::kRmsNorm: case Op::kRmsNormGrad: case Op::kLayerNorm: case Op::kLayerNormGrad:
      return OpFamily::kAttentionAndNorm;
    case Op::kGather: case Op::kScatterAdd: case Op::kCrossEntropy: case Op::kCrossEntropyGrad:
      return OpFamily::kEmbeddingAndLoss;
    case Op::kMatMul:
      return OpFamily::kGemm;
    case Op::kQuantStats: case Op::kErrorStats: case Op::kSmoothScales: case Op::kQuantParams:
    case Op::kQuantize: case Op::kFakeQuant: case Op::kQMatMul:
      return OpFamily::kQuantization;
    case Op::kAllReduce: case Op::kAllGather: case Op::kReduceScatter: case Op::kShard:
      return OpFamily::kCollective;
  }
  throw InternalError(fmt::format("cpu backend: op {} is not in ops.def", static_cast<int>(op)));
}

// A family's lowering reached with an op of another family: familyOf is wrong.
[[noreturn]] void notInFamily(const Node& node, const char* family) {
  throw InternalError(fmt::format("cpu backend: %{} ({}) was dispatched to the {} lowering", node.name(),
                                  opName(node.op()), family));
}

// false, with the reason in `why` when the caller asks for it.
bool refuse(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return false;
}

// The elementwise, layout, reduction, attention, normalization, embedding and loss
// kernels read and write f32 only (index operands are s32).
bool f32Only(const Node& node, std::string* why) {
  if (node.dtype() != DType::kF32)
    return refuse(why, fmt::format("{} on {} (elementwise kernels are f32 only)", opName(node.op()),
                                   dtypeName(node.dtype())));
  for (const Node* operand : node.operands())
    if (operand->dtype() == DType::kBF16)
      return refuse(why, fmt::format("{} with a bf16 operand (elementwise kernels are f32 only)",
                                     opName(node.op())));
  return true;
}

// How a broadcast node maps onto the [outer, inner] view of the binary kernel.
struct BcastView {
  k::Bcast mode;
  int64_t outer;
  int64_t inner;
};

std::optional<BcastView> bcastView(const Node& broadcast) {
  const Shape& out = broadcast.shape();
  const Shape& in = broadcast.operand(0)->shape();
  const auto& dims = broadcast.attrs().getInts(AttrKey::kDims);
  int64_t n_out = out.numElements(), n_in = in.numElements();
  if (n_in == 1) return BcastView{k::Bcast::kScalar, 1, n_out};
  const int r = out.rank(), kk = in.rank();
  bool trailing = true, leading = true;
  for (int i = 0; i < kk; ++i) {
    trailing = trailing && dims[static_cast<size_t>(i)] == r - kk + i;
    leading = leading && dims[static_cast<size_t>(i)] == i;
  }
  if (trailing) return BcastView{k::Bcast::kRow, n_out / n_in, n_in};
  if (leading) return BcastView{k::Bcast::kCol, n_in, n_out / n_in};
  return std::nullopt;
}

int64_t lastDim(const Node& node) { return node.shape().dim(node.shape().rank() - 1); }
// A zero-width last dim has no rows to run (and no division by zero).
int64_t rowsOf(const Node& node) { return lastDim(node) == 0 ? 0 : node.shape().numElements() / lastDim(node); }

// softmax's and softmax_grad's optional scale and causal mask (ops.def).
k::SoftmaxPrologue softmaxPrologue(const Node& node) {
  k::SoftmaxPrologue p;
  const Attrs& a = node.attrs();
  if (a.has(AttrKey::kScale)) p.scale = static_cast<float>(a.getFloat(AttrKey::kScale));
  if (a.has(AttrKey::kCausal)) {
    p.causal = true;
    p.fill = static_cast<float>(a.getFloat(AttrKey::kCausal));
    p.tq = node.shape().dim(node.shape().rank() - 2);
  }
  return p;
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(Collectives* collectives) : collectives_(collectives) {}
  std::string_view name() const override { return "cpu"; }
  bool supports(const Node& node, std::string* why) const override;
  bool readsBroadcastInPlace(const Node& user, int index) const override;
  Kernel lower(const Node& node, LoweringContext& ctx) const override;
  void prepare(std::span<const Node* const> schedule, const std::unordered_set<const Node*>& outputs) override;
  bool absorbed(const Node& node) const override { return scatters_in_adds_.count(&node) > 0; }
  int inPlaceOperand(const Node& node) const override {
    auto it = in_place_.find(&node);
    return it == in_place_.end() ? -1 : it->second;
  }
  std::optional<double> sumOfSquares(const Node& node) const override {
    auto it = squares_.find(&node);
    if (it == squares_.end()) return std::nullopt;
    return *it->second;
  }
  const Node* madeBy(const Node& node) const override {
    auto it = made_by_.find(&node);
    return it == made_by_.end() ? nullptr : it->second;
  }

 private:
  bool supportsCollective(const Node& node, std::string* why) const;
  // One lowering per op family (familyOf); the families' own kernels follow each.
  Kernel lowerGraphInterface(const Node& node, LoweringContext& ctx) const;
  Kernel lowerElementwise(const Node& node, LoweringContext& ctx) const;
  Kernel lowerBinary(const Node& node, LoweringContext& ctx, k::BinaryOp op) const;
  Kernel lowerLayout(const Node& node, LoweringContext& ctx) const;
  Kernel lowerAttentionAndNorm(const Node& node, LoweringContext& ctx) const;
  Kernel lowerEmbeddingAndLoss(const Node& node, LoweringContext& ctx) const;
  Kernel lowerQuantization(const Node& node, LoweringContext& ctx) const;
  Kernel lowerMatMul(const Node& node, LoweringContext& ctx) const;
  Kernel lowerReduce(const Node& node, LoweringContext& ctx) const;
  Kernel lowerConvert(const Node& node, LoweringContext& ctx) const;
  Kernel lowerQuantStats(const Node& node, LoweringContext& ctx) const;
  Kernel lowerErrorStats(const Node& node, LoweringContext& ctx) const;
  Kernel lowerQuantize(const Node& node, LoweringContext& ctx) const;
  std::optional<k::ParamQuantization> parameterQuantization(const Node& quantize) const override;
  std::shared_ptr<KernelState> kernelState(const Node& node) const override {
    auto it = states_.find(&node);
    return it == states_.end() ? nullptr : it->second;
  }
  uint64_t noiseSeed(const Node& node) const;
  Kernel lowerDelayedScale(const Node& node, int x, int y, size_t n, int64_t history) const;
  Kernel lowerPredictedScale(const Node& node, int x, int y, size_t n) const;
  Kernel lowerQMatMul(const Node& node, LoweringContext& ctx) const;
  Kernel lowerSmoothScales(const Node& node, LoweringContext& ctx) const;
  Kernel lowerCollective(const Node& node, LoweringContext& ctx) const;

  // Data-parallel gradient averaging, bucketed (as PyTorch DDP does): the all_reduce(dp)
  // nodes whose values are only graph outputs (the gradients) are grouped, in schedule
  // order, into buckets of up to kBucketBytes; each member's kernel copies its gradient
  // out, and the bucket's last member reduces all of them in one collective (packed into
  // one buffer). Buckets fill while the backward pass runs, so early ones are reduced
  // before it ends. PGQ_DP_BUCKET_MB sets the size (default 25, DDP's); 0 reduces each
  // gradient on its own.
  struct Bucket {
    std::vector<std::pair<float*, int64_t>> members;  // filled as the kernels run
    size_t size = 0;                                  // members it will have
    std::vector<float> packed;
  };
  struct BucketSeat {
    std::shared_ptr<Bucket> bucket;
    bool last = false;
  };
  std::unordered_map<const Node*, BucketSeat> seats_;
  void planBuckets(std::span<const Node* const> schedule);

  // quant_params nodes whose quantize computes their scales itself (quantizeDynamic:
  // one read of the operand from memory instead of two). Their own kernel does nothing;
  // every other reader of the scales runs after that quantize (planFusedScales).
  std::unordered_set<const Node*> fused_params_;
  // The kernels that keep a state from run to run, as lower() makes them.
  mutable std::unordered_map<const Node*, std::shared_ptr<KernelState>> states_;
  void planFusedScales(std::span<const Node* const> schedule);

  // add(a, scatter_add(dy, idx)) where the scatter_add is read by nothing else and is not
  // an output (a tied embedding's gradient): the add runs kernels::addScatter, and the
  // scatter_add is absorbed: no buffer, no kernel (planScatterAdds). By add, its
  // scatter_add.
  std::unordered_map<const Node*, const Node*> scatter_adds_;
  std::unordered_set<const Node*> scatters_in_adds_;
  // Kernels that write their result over an operand, by the operand's index: such adds
  // over their other operand (planScatterAdds), and elementwise maps over an operand
  // nothing else reads (planElementwiseInPlace).
  std::unordered_map<const Node*, int> in_place_;
  void planScatterAdds(std::span<const Node* const> schedule, const std::unordered_set<const Node*>& outputs);
  // A map whose kernel may write over an operand (unary and binary elementwise ops, the
  // activations' gradients, rope, softmax and its gradient) writes over one that is f32 of its shape, read by
  // nothing else and not an output, made by a kernel of this graph: its result then
  // needs no buffer of its own, and the store no read of fresh lines (PyTorch's in-place
  // ops). The executor keeps the operand's arena slot for the result.
  void planElementwiseInPlace(std::span<const Node* const> schedule, const std::unordered_set<const Node*>& outputs);
  Kernel lowerAddScatter(const Node& add, const Node& scatter, LoweringContext& ctx) const;

  // A softmax or softmax_grad of [items.., rows, cols] and the quantizations scheduled
  // right after it of its result or of an operand of its shape, which quantize each
  // [rows, cols] item on its own (kernels::quantizesItemsAlone): its kernel makes each
  // item, then quantizes it while it is in cache (kernels::quantizeItems), and those
  // quantize and quant_params nodes have no kernel of their own (Backend::madeBy). An
  // int8 attention's probabilities P and their gradient dS are each quantized twice,
  // along their rows and along their columns (P V, P^T dO; dS K, dS^T Q), and were read
  // back from memory for each (planItemQuantizations). By node: the softmax that makes
  // it; by softmax: its quantizations in schedule order.
  std::unordered_map<const Node*, const Node*> made_by_;
  std::unordered_map<const Node*, std::vector<const Node*>> item_quantizations_;
  void planItemQuantizations(std::span<const Node* const> schedule, const std::unordered_set<const Node*>& outputs);
  Kernel lowerSoftmaxQuantizingItems(const Node& node, LoweringContext& ctx) const;

  // int8 GEMMs whose result is a graph output (a weight gradient): their rescale pass sums
  // the squares for the gradient norm as it writes (kernels::int8Gemm), here, by node.
  std::unordered_map<const Node*, std::shared_ptr<double>> squares_;

  Collectives* collectives_;  // not owned
};

// Whether nothing in `live` (the nodes that run) but `reader` reads `value`.
bool readOnlyByIn(const Node* value, const Node* reader, const std::unordered_set<const Node*>& live) {
  for (const Node* user : value->users())
    if (user != reader && live.count(user)) return false;
  return true;
}

// The kernels' view of a quantized operand; the rewrite guarantees an order the int8
// kernels read directly (supports() rejects anything else).
k::OperandView quantView(const Node& node) {
  return quantViewLayout(node.operand(0)->shape(), node.attrs().getInts(AttrKey::kContractDims),
                         node.attrs().getIntsOr(AttrKey::kBatchDims, {}))
      .view;
}

// The quantization ops read their operand in the layouts the int8 kernels take directly.
bool supportsQuantization(const Node& node, std::string* why) {
  // The passes give every quantizing node the seed of its stochastic-rounding stream; the
  // verifier does not ask for one, the kernels do.
  const bool rounds = node.op() == Op::kQuantStats || node.op() == Op::kQuantize || node.op() == Op::kFakeQuant;
  if (rounds && !node.attrs().has(AttrKey::kSeed))
    return refuse(why, fmt::format("{} without a seed (its stochastic rounding's stream)", opName(node.op())));
  switch (node.op()) {
    case Op::kQuantStats:
      return node.operand(0)->dtype() == DType::kF32 || refuse(why, "quant_stats of a non-f32 tensor");
    case Op::kErrorStats:
      return f32Only(node, why);
    case Op::kQuantParams:
    case Op::kQuantize:
    case Op::kFakeQuant:
      if (operandOrder(node.operand(0)->shape().rank(), node.attrs().getInts(AttrKey::kContractDims),
                       node.attrs().getIntsOr(AttrKey::kBatchDims, {})) == OperandOrder::kNeedsPermute)
        return refuse(why, "the operand's dims are not [batch, free, contract] or [batch, contract, free]");
      return true;
    case Op::kSmoothScales: {
      DotDims d = DotDims::fromAttrs(node.attrs());
      bool readable = operandOrder(node.operand(0)->shape().rank(), d.lhs_contract, d.lhs_batch) != OperandOrder::kNeedsPermute &&
                      operandOrder(node.operand(1)->shape().rank(), d.rhs_contract, d.rhs_batch) != OperandOrder::kNeedsPermute;
      return readable || refuse(why, "operands in an order the kernel cannot read");
    }
    case Op::kQMatMul: {
      DotDims dims = DotDims::fromAttrs(node.attrs());
      GemmLayout layout = gemmLayout(node.operand(0)->shape(), node.operand(1)->shape(), dims);
      if (layout.lhs_perm || layout.rhs_perm) return refuse(why, "int8 operands in an order the GEMM cannot read");
      try {
        k::checkExactInt8Gemm(node.attrs().getFormat(AttrKey::kLhsFormat), node.attrs().getFormat(AttrKey::kRhsFormat));
      } catch (const k::KernelError& e) {
        return refuse(why, e.what());
      }
      return true;
    }
    default: notInFamily(node, "quantization");
  }
}

bool CpuBackend::supports(const Node& node, std::string* why) const {
  switch (familyOf(node.op())) {
    case OpFamily::kGraphInterface:
      // The caller binds parameters and inputs; a constant is filled by an f32 kernel.
      return node.op() != Op::kConstant || f32Only(node, why);
    case OpFamily::kConvert: {
      DType from = node.operand(0)->dtype(), to = node.dtype();
      bool ok = from == to || (from == DType::kF32 && to == DType::kBF16) ||
                (from == DType::kBF16 && to == DType::kF32);
      return ok || refuse(why, fmt::format("convert {} -> {} (only f32 <-> bf16)", dtypeName(from), dtypeName(to)));
    }
    case OpFamily::kLayout:
      // A reshape is its operand's buffer. A slice copies 4-byte elements without looking
      // at them: s32 too (the next-token targets of an imported model are a slice of its
      // tokens).
      if (node.op() == Op::kReshape || (node.op() == Op::kSlice && node.dtype() == DType::kS32)) return true;
      return f32Only(node, why);
    case OpFamily::kElementwise:
    case OpFamily::kReduction:
    case OpFamily::kAttentionAndNorm:
    case OpFamily::kEmbeddingAndLoss:
      return f32Only(node, why);
    case OpFamily::kGemm:
      return true;  // f32 or bf16 operands (the verifier guarantees the dtypes)
    case OpFamily::kQuantization:
      return supportsQuantization(node, why);
    case OpFamily::kCollective:
      return f32Only(node, why) && supportsCollective(node, why);
  }
  throw InternalError(fmt::format("cpu backend: %{} ({}) has no op family", node.name(), opName(node.op())));
}

// all_gather, reduce_scatter and shard split a value into `devices` parts, one per
// process of the job's group.
bool CpuBackend::supportsCollective(const Node& node, std::string* why) const {
  if (node.op() == Op::kAllReduce) return true;
  const DeviceGroup group = node.attrs().getGroup(AttrKey::kGroup);
  const int64_t devices = node.attrs().getInt(AttrKey::kDevices);
  if (collectives_->size(group) == devices) return true;
  return refuse(why, fmt::format("{} over {} devices, but this job's {} group has {} process(es); start it with "
                                 "mpirun so that --tensor-parallel matches the model's split",
                                 opName(node.op()), devices, nameOf(group), collectives_->size(group)));
}

bool CpuBackend::readsBroadcastInPlace(const Node& user, int index) const {
  if (!binaryOp(user.op())) return false;
  const Node* bc = user.operand(index);
  const Node* other = user.operand(1 - index);
  // At most one distinct broadcast per kernel call: the view splits the output by it.
  if (other != bc && other->op() == Op::kBroadcast) return false;
  return bc->op() == Op::kBroadcast && bc->dtype() == DType::kF32 && bcastView(*bc).has_value();
}

Kernel CpuBackend::lowerBinary(const Node& node, LoweringContext& ctx, k::BinaryOp op) const {
  OperandRef a = ctx.operand(0), b = ctx.operand(1);
  int y = ctx.result();
  k::Bcast am = k::Bcast::kFull, bm = k::Bcast::kFull;
  int64_t outer = 1, inner = node.shape().numElements();
  for (auto [ref, mode] : {std::pair{&a, &am}, std::pair{&b, &bm}}) {
    if (!ref->broadcast) continue;
    BcastView v = *bcastView(*ref->broadcast);
    *mode = v.mode;
    if (v.mode != k::Bcast::kScalar) {
      outer = v.outer;
      inner = v.inner;
    }
  }
  int sa = a.slot, sb = b.slot;
  return [=](const RunContext& rc) {
    k::binary(op, rc.as<float>(sa), am, rc.as<float>(sb), bm, rc.as<float>(y), outer, inner);
  };
}

Kernel CpuBackend::lowerMatMul(const Node& node, LoweringContext& ctx) const {
  const Node& lhs = *node.operand(0);
  const Node& rhs = *node.operand(1);
  DotDims dims = DotDims::fromAttrs(node.attrs());
  GemmLayout layout = gemmLayout(lhs.shape(), rhs.shape(), dims);
  int y = ctx.result();
  // Two bf16 operands that oneDNN can read as they are stored (strides, no permute):
  // its native bf16 GEMM where the CPU has bf16 dot products (kernels/gemm.h).
  if (lhs.dtype() == DType::kBF16 && rhs.dtype() == DType::kBF16 && k::hasBf16Gemm() && !layout.lhs_perm &&
      !layout.rhs_perm) {
    const k::GemmShape shape = layout.shape;
    const int a = ctx.operand(0).slot, b = ctx.operand(1).slot;
    return [=](const RunContext& rc) {
      k::gemmBf16(shape, {rc.as<uint16_t>(a), static_cast<size_t>(shape.sizeA())},
                  {rc.as<uint16_t>(b), static_cast<size_t>(shape.sizeB())},
                  {rc.as<float>(y), static_cast<size_t>(shape.sizeC())});
    };
  }
  // oneDNN 2.6's f32 gemm:jit runs a transposed A (the weight-gradient GEMM, which
  // contracts over tokens) at 40-45 GFLOP/s instead of ~90 (docs/PERFORMANCE.md);
  // transposing A into scratch costs one memory pass and wins back most of that.
  if (layout.shape.trans_a) {
    std::vector<int64_t> perm = dims.lhs_batch;
    for (int64_t d : dims.lhsFree(lhs.shape().rank())) perm.push_back(d);
    for (int64_t d : dims.lhs_contract) perm.push_back(d);
    layout.lhs_perm = perm;
    layout.shape.trans_a = false;
  }
  // Each operand may need widening from bf16 (exact) and/or a permute into a layout
  // oneDNN can read with strides; both go through scratch buffers.
  struct Prep {
    int src = -1;
    int widened = -1;
    int permuted = -1;
    std::vector<int64_t> dims = {};
    std::vector<int64_t> perm = {};
    int64_t n = 0;
    bool bf16 = false;
  };
  auto prepare = [&](int index, const Node& operand, const std::optional<std::vector<int64_t>>& perm) {
    Prep p;
    p.src = ctx.operand(index).slot;
    p.n = operand.shape().numElements();
    p.bf16 = operand.dtype() == DType::kBF16;
    if (p.bf16) p.widened = ctx.scratch(static_cast<size_t>(p.n) * sizeof(float));
    if (perm) {
      p.permuted = ctx.scratch(static_cast<size_t>(p.n) * sizeof(float));
      p.dims.assign(operand.shape().dims().begin(), operand.shape().dims().end());
      p.perm = *perm;
    }
    return p;
  };
  Prep pa = prepare(0, lhs, layout.lhs_perm);
  Prep pb = prepare(1, rhs, layout.rhs_perm);
  k::GemmShape shape = layout.shape;
  auto run = [](const RunContext& rc, const Prep& p) -> const float* {
    const float* data = rc.as<float>(p.src);
    if (p.bf16) {
      k::bf16ToF32(rc.as<uint16_t>(p.src), rc.as<float>(p.widened), p.n);
      data = rc.as<float>(p.widened);
    }
    if (p.permuted >= 0) {
      k::transpose(data, rc.as<float>(p.permuted), p.dims, p.perm);
      data = rc.as<float>(p.permuted);
    }
    return data;
  };
  return [=](const RunContext& rc) {
    const float* a = run(rc, pa);
    const float* b = run(rc, pb);
    k::gemmF32(shape, {a, static_cast<size_t>(shape.sizeA())}, {b, static_cast<size_t>(shape.sizeB())},
               {rc.as<float>(y), static_cast<size_t>(shape.sizeC())});
  };
}

k::ReduceOp reduceOp(const Node& node) {
  switch (node.op()) {
    case Op::kReduceSum: return k::ReduceOp::kSum;
    case Op::kReduceMax: return k::ReduceOp::kMax;
    case Op::kReduceMean: return k::ReduceOp::kMean;
    default: notInFamily(node, "reduction");
  }
}

Kernel CpuBackend::lowerReduce(const Node& node, LoweringContext& ctx) const {
  const Node& in = *node.operand(0);
  k::ReduceOp op = reduceOp(node);
  ReduceLayout layout = reduceLayout(in.shape(), node.attrs().getInts(AttrKey::kAxes));
  int x = ctx.operand(0).slot, y = ctx.result();
  int permuted = -1;
  std::vector<int64_t> dims(in.shape().dims().begin(), in.shape().dims().end());
  if (layout.perm) permuted = ctx.scratch(static_cast<size_t>(in.shape().numElements()) * sizeof(float));
  std::vector<int64_t> perm = layout.perm.value_or(std::vector<int64_t>{});
  return [=](const RunContext& rc) {
    const float* src = rc.as<float>(x);
    if (permuted >= 0) {
      k::transpose(src, rc.as<float>(permuted), dims, perm);
      src = rc.as<float>(permuted);
    }
    k::reduce(op, src, rc.as<float>(y), layout.outer, layout.mid, layout.inner);
  };
}

Kernel CpuBackend::lowerConvert(const Node& node, LoweringContext& ctx) const {
  int x = ctx.operand(0).slot, y = ctx.result();
  int64_t n = node.shape().numElements();
  DType from = node.operand(0)->dtype(), to = node.dtype();
  if (from == to) {
    size_t bytes = static_cast<size_t>(n) * dtypeSize(to);
    return [=](const RunContext& rc) { std::memcpy(rc.ptr(y), rc.ptr(x), bytes); };
  }
  if (to == DType::kBF16)
    return [=](const RunContext& rc) { k::f32ToBf16(rc.as<float>(x), rc.as<uint16_t>(y), n); };
  return [=](const RunContext& rc) { k::bf16ToF32(rc.as<uint16_t>(x), rc.as<float>(y), n); };
}

Kernel CpuBackend::lowerQuantStats(const Node& node, LoweringContext& ctx) const {
  const Node& in = *node.operand(0);
  QuantViewLayout layout = quantViewLayout(in.shape(), node.attrs().getInts(AttrKey::kContractDims),
                                           node.attrs().getIntsOr(AttrKey::kBatchDims, {}));
  std::vector<k::QuantFormat> formats = node.attrs().getFormats(AttrKey::kFormats);
  // Formats that differ only in rounding (a gradient's RTN and SR) have the same scales:
  // computeQuantParams does not read the rounding. One scales pass per distinct rest.
  std::vector<k::QuantFormat> scale_formats;
  std::vector<size_t> scales_of(formats.size());
  for (size_t f = 0; f < formats.size(); ++f) {
    k::QuantFormat key = formats[f];
    key.rounding = Rounding::kNearest;
    auto it = std::find(scale_formats.begin(), scale_formats.end(), key);
    scales_of[f] = static_cast<size_t>(it - scale_formats.begin());
    if (it == scale_formats.end()) scale_formats.push_back(key);
  }
  const uint64_t seed = static_cast<uint64_t>(node.attrs().getInt(AttrKey::kSeed));
  const bool bias = node.attrs().has(AttrKey::kBias) && node.attrs().getInt(AttrKey::kBias) != 0;
  const int64_t n = in.shape().numElements();
  int x = ctx.operand(0).slot, y = ctx.result();
  int permuted = layout.perm ? ctx.scratch(static_cast<size_t>(n) * sizeof(float)) : -1;
  std::vector<size_t> param_counts;
  std::vector<int> param_slots;  // one scales buffer per scale format
  for (const k::QuantFormat& format : scale_formats) {
    param_counts.push_back(static_cast<size_t>(k::quantParamCount(layout.view, format)));
    param_slots.push_back(ctx.scratch(param_counts.back() * sizeof(float)));
  }
  std::vector<int64_t> dims(in.shape().dims().begin(), in.shape().dims().end());
  return [=](const RunContext& rc) {
    const float* data = rc.as<float>(x);
    if (permuted >= 0) {
      k::transpose(data, rc.as<float>(permuted), dims, *layout.perm);
      data = rc.as<float>(permuted);
    }
    float* out = rc.as<float>(y);
    const std::span<const float> values(data, static_cast<size_t>(n));
    std::vector<std::span<float>> params;
    for (size_t g = 0; g < scale_formats.size(); ++g) params.emplace_back(rc.as<float>(param_slots[g]), param_counts[g]);
    // The step picks the signs of a Hadamard transform (kernels/hadamard.h). Formats with
    // the same groups (int8 and int7 per channel) read x once for their scales.
    k::computeQuantParams(values, layout.view, scale_formats, params, {seed, static_cast<uint64_t>(rc.step())});
    // The step is the stream offset: each profiled step draws fresh SR noise. Formats
    // that share a walk (int8 and int7 per channel) are measured in one pass.
    const k::SrStream sr{seed, static_cast<uint64_t>(rc.step())};
    std::vector<std::span<const float>> format_params;
    for (size_t f = 0; f < formats.size(); ++f) format_params.emplace_back(params[scales_of[f]]);
    const std::vector<k::QuantStats> stats =
        k::quantStatsWithParams(values, layout.view, formats, format_params, sr, /*params_from_x=*/true);
    for (size_t f = 0; f < formats.size(); ++f) {
      const k::QuantStats& s = stats[f];
      float* row = out + f * kStatFields;
      // The same quantized values (same params and noise stream), their errors summed
      // along the contracting dim.
      double bias_sqnr = 0;
      if (bias) {
        const double coherent = k::coherentErrorMeanSquare(values, layout.view, formats[f], params[scales_of[f]], sr);
        bias_sqnr = coherent > 0 ? std::min(s.mean_square / coherent, k::kSqnrCap) : k::kSqnrCap;
      }
      row[static_cast<int>(StatField::kBiasSqnr)] = static_cast<float>(bias_sqnr);
      double total = static_cast<double>(std::max<int64_t>(1, s.count));
      row[static_cast<int>(StatField::kSqnr)] = static_cast<float>(s.sqnr);
      row[static_cast<int>(StatField::kMse)] = static_cast<float>(s.mse);
      row[static_cast<int>(StatField::kMeanSquare)] = static_cast<float>(s.mean_square);
      row[static_cast<int>(StatField::kAbsmax)] = static_cast<float>(s.absmax);
      row[static_cast<int>(StatField::kZeroFraction)] = static_cast<float>(s.zero_fraction);
      row[static_cast<int>(StatField::kUnderflowFraction)] = static_cast<float>(s.underflow_fraction);
      row[static_cast<int>(StatField::kClippedFraction)] = static_cast<float>(s.clipped_fraction);
      row[static_cast<int>(StatField::kNonfiniteFraction)] =
          static_cast<float>(static_cast<double>(s.nan_count + s.inf_count) / total);
    }
  };
}

Kernel CpuBackend::lowerErrorStats(const Node& node, LoweringContext& ctx) const {
  const int reference = ctx.operand(0).slot, approx = ctx.operand(1).slot, y = ctx.result();
  const int64_t n = node.operand(0)->shape().numElements();
  return [=](const RunContext& rc) {
    const k::ErrorStats s = k::errorStats(rc.as<float>(reference), rc.as<float>(approx), n);
    float* out = rc.as<float>(y);
    out[static_cast<int>(ErrorStatField::kSqnr)] = static_cast<float>(s.sqnr);
    out[static_cast<int>(ErrorStatField::kMeanSquare)] = static_cast<float>(s.mean_square);
    out[static_cast<int>(ErrorStatField::kMse)] = static_cast<float>(s.mse);
  };
}

// The stochastic-rounding stream of a quantize or fake_quant node. The devices of a
// tensor-parallel group share the streams (a value they all hold must round alike on
// each), except where the node reads a part of a split value: each device's part then
// takes its own stream (2^48 apart per device), or element i of every part would round
// with the same noise (errors correlated across the parts, e.g. of the partial products
// a row-parallel GEMM sums). Device 0 keeps the graph's seed.
uint64_t CpuBackend::noiseSeed(const Node& node) const {
  const uint64_t seed = static_cast<uint64_t>(node.attrs().getInt(AttrKey::kSeed));
  const Node& x = *node.operand(0);
  const bool split = x.op() == Op::kShard ||
                     (x.attrs().has(AttrKey::kSplit) && x.attrs().getInts(AttrKey::kSplit).size() == 2 &&
                      x.attrs().getInts(AttrKey::kSplit)[1] > 1);
  if (!split) return seed;
  return seed + (static_cast<uint64_t>(collectives_->rank(DeviceGroup::kTensor)) << 48);
}

Kernel CpuBackend::lowerQuantize(const Node& node, LoweringContext& ctx) const {
  k::OperandView view = quantView(node);
  k::QuantFormat format = node.attrs().getFormat(AttrKey::kFormat);
  const size_t n = static_cast<size_t>(node.operand(0)->shape().numElements());
  int x = ctx.operand(0).slot, y = ctx.result();
  if (node.op() == Op::kQuantParams) {
    if (fused_params_.count(&node)) return [](const RunContext&) {};  // its quantize computes them
    size_t count = static_cast<size_t>(node.shape().numElements());
    const int64_t history = node.attrs().has(AttrKey::kAmaxHistory) ? node.attrs().getInt(AttrKey::kAmaxHistory) : 0;
    if (history > 0) return lowerDelayedScale(node, x, y, n, history);
    if (node.attrs().has(AttrKey::kPredictScale) && node.attrs().getInt(AttrKey::kPredictScale) != 0)
      return lowerPredictedScale(node, x, y, n);
    return [=](const RunContext& rc) {
      // The step picks the signs of a Hadamard transform, the same for both operands of a
      // GEMM (kernels/hadamard.h).
      k::computeQuantParams({rc.as<float>(x), n}, view, format, {rc.as<float>(y), count},
                            {0, static_cast<uint64_t>(rc.step())});
    };
  }
  int params = ctx.operand(1).slot;
  size_t count = static_cast<size_t>(node.operand(1)->shape().numElements());
  const uint64_t seed = noiseSeed(node);
  if (node.op() == Op::kFakeQuant)
    return [=](const RunContext& rc) {
      k::fakeQuantize({rc.as<float>(x), n}, view, format, {rc.as<float>(params), count},
                      {rc.as<float>(y), n}, {seed, static_cast<uint64_t>(rc.step())});
    };
  if (fused_params_.count(node.operand(1))) {
    // The scales and the quantization in one pass; the scales land in the quant_params
    // node's buffer, which every other reader reads after this kernel.
    if (node.dtype() == DType::kU8)
      return [=](const RunContext& rc) {
        k::quantizeDynamic({rc.as<float>(x), n}, view, format, {rc.as<float>(params), count},
                           std::span<uint8_t>(rc.as<uint8_t>(y), n), {seed, static_cast<uint64_t>(rc.step())});
      };
    return [=](const RunContext& rc) {
      k::quantizeDynamic({rc.as<float>(x), n}, view, format, {rc.as<float>(params), count},
                         std::span<int8_t>(rc.as<int8_t>(y), n), {seed, static_cast<uint64_t>(rc.step())});
    };
  }
  if (node.dtype() == DType::kU8)
    return [=](const RunContext& rc) {
      // The step is the stream offset: every step draws fresh stochastic-rounding noise.
      k::quantize({rc.as<float>(x), n}, view, format, {rc.as<float>(params), count}, std::span<uint8_t>(rc.as<uint8_t>(y), n),
                  {seed, static_cast<uint64_t>(rc.step())});
    };
  return [=](const RunContext& rc) {
    k::quantize({rc.as<float>(x), n}, view, format, {rc.as<float>(params), count}, std::span<int8_t>(rc.as<int8_t>(y), n),
                {seed, static_cast<uint64_t>(rc.step())});
  };
}

// Delayed scaling (Transformer Engine's DelayedScaling): the per-tensor scale of step t
// comes from the amax history of the steps before it, reduced by `amax_compute` (max or
// most_recent); this step's amax then enters the history, which keeps the last
// `history` steps. The first step has no history and scales just in time. As TE's
// _default_sf_compute, an amax of 0 keeps the scale of the step before (at first 1): the
// smallest scale it gave instead flushed the next step's whole tensor (a LoRA B or a
// gradient that is all zero for a step). The history lives with the lowered kernel and
// a checkpoint keeps it (KernelState): a resumed run scales as the uninterrupted one.
namespace {

// Bytes of trivially copyable values, in order, and back.
class ByteWriter {
 public:
  template <typename T>
  void put(const T& value) {
    const char* p = reinterpret_cast<const char*>(&value);
    bytes_.append(p, sizeof(T));
  }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  bool get(T& value) {
    if (bytes_.size() < sizeof(T)) return false;
    std::memcpy(&value, bytes_.data(), sizeof(T));
    bytes_.remove_prefix(sizeof(T));
    return true;
  }
  bool done() const { return bytes_.empty(); }

 private:
  std::string_view bytes_;
};

struct DelayedScaleState final : KernelState {
  explicit DelayedScaleState(int64_t history) : amax(static_cast<size_t>(history), 0.0f) {}
  // Saved as the history's length, the number of steps it holds (at most its length), the
  // last scale given, and the history oldest first, zeros after: what the ring means,
  // whatever its position, in as many bytes at every step.
  std::string save() const override {
    const int64_t length = static_cast<int64_t>(amax.size());
    const int64_t have = std::min(seen, length);
    ByteWriter out;
    out.put(length);
    out.put(have);
    out.put(scale);
    for (int64_t i = 0; i < length; ++i) out.put(i < have ? amax[static_cast<size_t>((seen - have + i) % length)] : 0.0f);
    return out.take();
  }
  bool load(std::string_view bytes) override {
    ByteReader in(bytes);
    int64_t length = 0, have = 0;
    float given = 0;
    if (!in.get(length) || length != static_cast<int64_t>(amax.size()) || !in.get(have) || have < 0 ||
        have > length || !in.get(given) || !std::isfinite(given) || !(given > 0.0f))
      return false;
    std::vector<float> ring(amax.size(), 0.0f);
    for (float& value : ring)
      if (!in.get(value) || !std::isfinite(value) || value < 0.0f) return false;
    if (!in.done()) return false;
    amax = std::move(ring);
    seen = have;
    scale = given;
    return true;
  }

  std::vector<float> amax;  // ring of the last `history` amax values
  int64_t seen = 0;
  float scale = 1.0f;  // the last scale given
};

// The predicted amax: < 0 until the first run measures it.
struct PredictedScaleState final : KernelState {
  std::string save() const override {
    ByteWriter out;
    out.put(amax);
    return out.take();
  }
  bool load(std::string_view bytes) override {
    ByteReader in(bytes);
    double value = 0;
    if (!in.get(value) || !in.done() || !std::isfinite(value)) return false;
    amax = value < 0 ? -1.0 : value;
    return true;
  }

  double amax = -1.0;
};

}  // namespace

Kernel CpuBackend::lowerDelayedScale(const Node& node, int x, int y, size_t n, int64_t history) const {
  const k::QuantFormat format = node.attrs().getFormat(AttrKey::kFormat);
  const bool most_recent = node.attrs().getStringOr(AttrKey::kAmaxCompute, "max") == "most_recent";
  auto state = std::make_shared<DelayedScaleState>(history);
  states_[&node] = state;
  return [=](const RunContext& rc) {
    const float now = k::finiteAbsmax(rc.as<float>(x), static_cast<int64_t>(n));
    float amax = now;
    if (state->seen > 0) {
      const int64_t have = std::min(state->seen, history);
      const size_t last = static_cast<size_t>((state->seen - 1) % history);
      amax = most_recent ? state->amax[last] : *std::max_element(state->amax.begin(), state->amax.begin() + have);
    }
    if (amax > 0.0f) state->scale = k::emulatedScaleFromAbsmax(amax, amax, format);
    *rc.as<float>(y) = state->scale;
    state->amax[static_cast<size_t>(state->seen % history)] = now;
    ++state->seen;
  };
}

// Predicted weight scales (MOSS): the weight's amax is measured on the first run only;
// every later run adds the largest move the optimizer update since the previous run
// could have made (RunContext::weightStep: lr x AdamW's exact step bound), so the
// predicted amax is never below the true one and no max reduction runs. Like the amax
// history, the prediction lives with the lowered kernel and a checkpoint keeps it.
Kernel CpuBackend::lowerPredictedScale(const Node& node, int x, int y, size_t n) const {
  const k::QuantFormat format = node.attrs().getFormat(AttrKey::kFormat);
  auto state = std::make_shared<PredictedScaleState>();
  states_[&node] = state;
  return [=](const RunContext& rc) {
    double& amax = state->amax;
    if (amax < 0)
      amax = k::finiteAbsmax(rc.as<float>(x), static_cast<int64_t>(n));
    else
      amax += rc.weightStep();
    *rc.as<float>(y) = k::emulatedScaleFromAbsmax(amax, amax, format);
  };
}

static_assert(k::kMaxInt8GemmK == kCpuInt8MaxK, "the recipe generator's int8 K limit (plan/hardware.h) is the kernel's");

Kernel CpuBackend::lowerQMatMul(const Node& node, LoweringContext& ctx) const {
  k::GemmShape shape =
      gemmLayout(node.operand(0)->shape(), node.operand(1)->shape(), DotDims::fromAttrs(node.attrs())).shape;
  k::QuantFormat fa = node.attrs().getFormat(AttrKey::kLhsFormat);
  k::QuantFormat fb = node.attrs().getFormat(AttrKey::kRhsFormat);
  // Refused when the graph is compiled, before the run starts: the kernel refused it at
  // the first step, after metrics.csv was made (a batch of 4200 x 16 tokens in a wgrad).
  if (shape.k > k::kMaxInt8GemmK)
    throw Error(fmt::format("GEMM '{}' runs in int8 with a contracting dimension K = {}, beyond the {} that int32 "
                            "accumulates exactly: keep it in high precision in the recipe, or reduce batch x seq_len",
                            node.attrs().getStringOr(AttrKey::kLabel, node.name()), shape.k, k::kMaxInt8GemmK));
  int qa = ctx.operand(0).slot, qb = ctx.operand(1).slot, pa = ctx.operand(2).slot, pb = ctx.operand(3).slot;
  int y = ctx.result();
  size_t na = static_cast<size_t>(node.operand(2)->shape().numElements());
  size_t nb = static_cast<size_t>(node.operand(3)->shape().numElements());
  auto squares = squares_.find(&node);
  std::shared_ptr<double> sum_squares = squares == squares_.end() ? nullptr : squares->second;
  return [=](const RunContext& rc) {
    k::int8Gemm(shape, {rc.as<uint8_t>(qa), static_cast<size_t>(shape.sizeA())}, fa, {rc.as<float>(pa), na},
                {rc.as<int8_t>(qb), static_cast<size_t>(shape.sizeB())}, fb, {rc.as<float>(pb), nb},
                {rc.as<float>(y), static_cast<size_t>(shape.sizeC())}, sum_squares.get());
  };
}

Kernel CpuBackend::lowerSmoothScales(const Node& node, LoweringContext& ctx) const {
  DotDims d = DotDims::fromAttrs(node.attrs());
  k::OperandView va = quantViewLayout(node.operand(0)->shape(), d.lhs_contract, d.lhs_batch).view;
  k::OperandView vb = quantViewLayout(node.operand(1)->shape(), d.rhs_contract, d.rhs_batch).view;
  const float alpha = static_cast<float>(node.attrs().getFloat(AttrKey::kAlpha));
  const size_t na = static_cast<size_t>(node.operand(0)->shape().numElements());
  const size_t nb = static_cast<size_t>(node.operand(1)->shape().numElements());
  const size_t k = static_cast<size_t>(node.shape().numElements());
  int a = ctx.operand(0).slot, b = ctx.operand(1).slot, y = ctx.result();
  return [=](const RunContext& rc) {
    k::smoothQuantFactors({rc.as<float>(a), na}, va, {rc.as<float>(b), nb}, vb, alpha, {rc.as<float>(y), k});
  };
}

std::optional<k::ParamQuantization> CpuBackend::parameterQuantization(const Node& quantize) const {
  if (quantize.op() != Op::kQuantize || quantize.numOperands() != 2) return std::nullopt;
  const Node* x = quantize.operand(0);
  const Node* p = quantize.operand(1);
  if (x->op() != Op::kParameter || p->op() != Op::kQuantParams || p->operand(0) != x) return std::nullopt;
  auto intAttr = [&](AttrKey key) { return p->attrs().has(key) ? p->attrs().getInt(key) : 0; };
  if (intAttr(AttrKey::kAmaxHistory) > 0 || intAttr(AttrKey::kPredictScale) != 0) return std::nullopt;
  const k::QuantFormat format = quantize.attrs().getFormat(AttrKey::kFormat);
  if (!(p->attrs().getFormat(AttrKey::kFormat) == format) ||
      p->attrs().getInts(AttrKey::kContractDims) != quantize.attrs().getInts(AttrKey::kContractDims) ||
      p->attrs().getIntsOr(AttrKey::kBatchDims, {}) != quantize.attrs().getIntsOr(AttrKey::kBatchDims, {}))
    return std::nullopt;
  const k::OperandView view = quantView(quantize);
  if (!k::fusesIntoUpdate(view, format)) return std::nullopt;
  return k::ParamQuantization{view, format, quantize.dtype() == DType::kU8 ? k::GemmSide::kLhs : k::GemmSide::kRhs,
                              {}, nullptr};
}

// PGQ_DP_BUCKET_MB, checked like any number a user gives.
size_t bucketBytes() {
  const char* env = std::getenv("PGQ_DP_BUCKET_MB");
  if (env == nullptr || *env == '\0') return static_cast<size_t>(25) << 20;
  int64_t mb = -1;
  std::string_view text(env);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), mb);
  if (ec != std::errc() || end != text.data() + text.size() || mb < 0 || mb > 65536)
    throw Error(fmt::format("PGQ_DP_BUCKET_MB={}: expected an integer in [0, 65536] (MB of gradients per data-parallel "
                            "all_reduce; 0: one per gradient)",
                            env));
  return static_cast<size_t>(mb) << 20;
}

void CpuBackend::prepare(std::span<const Node* const> schedule, const std::unordered_set<const Node*>& outputs) {
  planFusedScales(schedule);
  planBuckets(schedule);
  planScatterAdds(schedule, outputs);
  planItemQuantizations(schedule, outputs);
  planElementwiseInPlace(schedule, outputs);
  squares_.clear();
  for (const Node* node : outputs)
    if (node->op() == Op::kQMatMul && node->dtype() == DType::kF32) squares_[node] = std::make_shared<double>(0.0);
}

void CpuBackend::planElementwiseInPlace(std::span<const Node* const> schedule,
                                        const std::unordered_set<const Node*>& outputs) {
  std::unordered_set<const Node*> live(schedule.begin(), schedule.end());
  for (const Node* node : schedule) {
    const Op op = node->op();
    // The kernels that say their result may alias these operands (kernels/elementwise.h,
    // kernels/rope.h, kernels/softmax.h); a binary op's broadcast operand is read in
    // place, never written.
    const bool maps = unaryOp(op) || binaryOp(op) || op == Op::kRope || op == Op::kGeluGrad ||
                      op == Op::kSiluGrad || op == Op::kGeluErfGrad || op == Op::kReluGrad ||
                      op == Op::kSoftmax || op == Op::kSoftmaxGrad;
    if (!maps || node->dtype() != DType::kF32 || in_place_.count(node) || scatter_adds_.count(node)) continue;
    for (int k = 0; k < node->numOperands(); ++k) {
      const Node* x = node->operand(k);
      bool alone = readOnlyByIn(x, node, live);
      for (int j = 0; j < node->numOperands(); ++j) alone = alone && (j == k || node->operand(j) != x);
      if (!alone || outputs.count(x) || x->dtype() != DType::kF32 || !(x->shape() == node->shape()) ||
          x->op() == Op::kParameter || x->op() == Op::kInput || x->op() == Op::kConstant || x->op() == Op::kReshape ||
          x->op() == Op::kBroadcast || made_by_.count(x) || scatters_in_adds_.count(x))
        continue;
      in_place_[node] = k;
      break;
    }
  }
}

// An item a kernel makes and quantizes in cache is at most this large (Zen 5's L2 per
// core; a 256-key attention's scores are 256 KiB per head).
constexpr int64_t kMaxItemBytes = int64_t{1} << 20;

void CpuBackend::planItemQuantizations(std::span<const Node* const> schedule,
                                       const std::unordered_set<const Node*>& outputs) {
  made_by_.clear();
  item_quantizations_.clear();
  std::unordered_set<const Node*> live(schedule.begin(), schedule.end());
  for (size_t i = 0; i < schedule.size(); ++i) {
    const Node* m = schedule[i];
    if ((m->op() != Op::kSoftmax && m->op() != Op::kSoftmaxGrad) || m->dtype() != DType::kF32 ||
        m->shape().rank() < 3)
      continue;
    const int rank = m->shape().rank();
    const int64_t rows = m->shape().dim(rank - 2), cols = m->shape().dim(rank - 1);
    if (rows * cols == 0 || rows * cols * 4 > kMaxItemBytes) continue;
    const int64_t items = m->shape().numElements() / (rows * cols);
    if (items < 2) continue;
    auto source = [&](const Node* v) {
      if (v == m) return true;
      for (const Node* operand : m->operands())
        if (v == operand && v->dtype() == DType::kF32 && v->shape() == m->shape()) return true;
      return false;
    };
    // The batch dims are the leading ones and K is one of the last two, so item b of the
    // kernels' view is item b of the value.
    std::vector<int64_t> leading(static_cast<size_t>(rank - 2));
    std::iota(leading.begin(), leading.end(), 0);
    auto itemWise = [&](const Node* q) {
      const std::vector<int64_t> contract = q->attrs().getInts(AttrKey::kContractDims);
      const int64_t history = q->attrs().has(AttrKey::kAmaxHistory) ? q->attrs().getInt(AttrKey::kAmaxHistory) : 0;
      const bool predicted = q->attrs().has(AttrKey::kPredictScale) && q->attrs().getInt(AttrKey::kPredictScale) != 0;
      k::QuantFormat format = q->attrs().getFormat(AttrKey::kFormat);
      if (q->op() == Op::kQuantParams) format.rounding = Rounding::kNearest;  // scales do not read it
      return !outputs.count(q) && source(q->operand(0)) && history == 0 && !predicted &&
             k::quantizesItemsAlone(format) && q->attrs().getIntsOr(AttrKey::kBatchDims, {}) == leading &&
             contract.size() == 1 && (contract[0] == rank - 1 || contract[0] == rank - 2);
    };
    std::vector<const Node*> run;
    std::unordered_set<const Node*> in_run;
    for (size_t j = i + 1; j < schedule.size(); ++j) {
      const Node* q = schedule[j];
      const bool quantization = q->op() == Op::kQuantParams || (q->op() == Op::kQuantize && in_run.count(q->operand(1)));
      if (!quantization || !itemWise(q)) break;
      run.push_back(q);
      in_run.insert(q);
    }
    // Scales are made here only with every quantize that reads them.
    size_t keep = run.size();
    for (size_t r = 0; r < run.size(); ++r)
      if (run[r]->op() == Op::kQuantParams)
        for (const Node* user : run[r]->users())
          if (live.count(user) && (user->op() == Op::kQuantize || user->op() == Op::kFakeQuant) && !in_run.count(user))
            keep = std::min(keep, r);
    run.resize(keep);
    if (run.empty()) continue;
    for (const Node* q : run) made_by_[q] = m;
    item_quantizations_[m] = std::move(run);
  }
}

Kernel CpuBackend::lowerSoftmaxQuantizingItems(const Node& node, LoweringContext& ctx) const {
  const std::vector<const Node*>& run = item_quantizations_.at(&node);
  const int rank = node.shape().rank();
  const int64_t rows = node.shape().dim(rank - 2), cols = node.shape().dim(rank - 1);
  const int64_t items = node.shape().numElements() / (rows * cols), item = rows * cols;
  const k::SoftmaxPrologue prologue = softmaxPrologue(node);
  const bool grad = node.op() == Op::kSoftmaxGrad;
  const int x = ctx.operand(0).slot, dy = grad ? ctx.operand(1).slot : -1, y = ctx.result();
  auto slotOf = [&](const Node* value) {
    if (value == &node) return y;
    for (int k = 0; k < node.numOperands(); ++k)
      if (node.operand(k) == value) return ctx.operand(k).slot;
    throw InternalError(fmt::format("%{} does not read %{}", node.name(), value->name()));
  };
  // Per entry: the slots of its value, its scales and its bytes (-1 for scales alone).
  struct Slots {
    int x, params, out;
  };
  std::vector<k::ItemQuantization> entries;
  std::vector<Slots> slots;
  std::unordered_map<const Node*, int> index;
  for (const Node* q : run) {
    k::ItemQuantization e;
    const k::OperandView whole = quantView(*q);
    e.item = {1, whole.rows, whole.cols, whole.contract_along_cols};
    e.format = q->attrs().getFormat(AttrKey::kFormat);
    if (q->op() == Op::kQuantParams) {
      e.format.rounding = Rounding::kNearest;
      index[q] = static_cast<int>(entries.size());
      slots.push_back({slotOf(q->operand(0)), ctx.resultOf(*q), -1});
    } else {
      e.scales_of = index.at(q->operand(1));
      e.u8 = q->dtype() == DType::kU8;
      e.sr = {noiseSeed(*q), 0};
      // The scales' only quantize makes them in the same pass where the formats agree.
      k::ItemQuantization& scales = entries[static_cast<size_t>(e.scales_of)];
      k::QuantFormat own = e.format;
      own.rounding = scales.format.rounding;
      int quantizes = 0;
      for (const Node* user : q->operand(1)->users()) quantizes += user->op() == Op::kQuantize && made_by_.count(user);
      e.dynamic = quantizes == 1 && own == scales.format;
      slots.push_back({slotOf(q->operand(0)), slots[static_cast<size_t>(e.scales_of)].params, ctx.resultOf(*q)});
    }
    entries.push_back(e);
  }
  return [=](const RunContext& rc) {
    std::vector<k::ItemQuantization> run_entries = entries;  // this run's buffers
    for (size_t i = 0; i < entries.size(); ++i) {
      k::ItemQuantization& e = run_entries[i];
      e.x = rc.as<float>(slots[i].x);
      e.params = rc.as<float>(slots[i].params);
      e.out = slots[i].out < 0 ? nullptr : rc.ptr(slots[i].out);
      e.sr.offset = static_cast<uint64_t>(rc.step());
    }
    const float* in = rc.as<float>(x);
    const float* grad_in = grad ? rc.as<float>(dy) : nullptr;
    float* out = rc.as<float>(y);
    k::quantizeItems(
        items,
        [&](int64_t b) {
          if (grad)
            k::softmaxGrad(in + b * item, grad_in + b * item, out + b * item, rows, cols, prologue);
          else
            k::softmax(in + b * item, out + b * item, rows, cols, prologue);
        },
        run_entries);
  };
}

void CpuBackend::planScatterAdds(std::span<const Node* const> schedule, const std::unordered_set<const Node*>& outputs) {
  scatter_adds_.clear();
  scatters_in_adds_.clear();
  in_place_.clear();
  std::unordered_set<const Node*> live(schedule.begin(), schedule.end());
  auto readOnlyBy = [&](const Node* value, const Node* reader) { return readOnlyByIn(value, reader, live); };
  for (const Node* add : schedule) {
    if (add->op() != Op::kAdd || add->dtype() != DType::kF32 || add->shape().rank() != 2) continue;
    for (int k = 0; k < 2; ++k) {
      const Node* s = add->operand(k);
      const Node* a = add->operand(1 - k);
      if (s->op() != Op::kScatterAdd || a == s || outputs.count(s) || !(a->shape() == add->shape()) ||
          !(s->shape() == add->shape()) || a->op() == Op::kBroadcast)
        continue;
      if (!readOnlyBy(s, add)) continue;
      scatter_adds_[add] = s;
      scatters_in_adds_.insert(s);
      // The add writes over a when nothing else reads a (a weight gradient's GEMM output):
      // only the touched rows change, and a's buffer and the pass over it go.
      if (!outputs.count(a) && a->op() != Op::kParameter && a->op() != Op::kInput && a->op() != Op::kConstant &&
          a->op() != Op::kReshape && a->dtype() == DType::kF32 && readOnlyBy(a, add))
        in_place_[add] = 1 - k;
      break;
    }
  }
}

Kernel CpuBackend::lowerAddScatter(const Node& add, const Node& scatter, LoweringContext& ctx) const {
  const int a = ctx.operand(add.operand(0) == &scatter ? 1 : 0).slot;
  const int dy = ctx.operandOf(scatter, 0).slot, idx = ctx.operandOf(scatter, 1).slot;
  const int y = ctx.result();
  const int64_t n_idx = scatter.operand(1)->shape().numElements();
  const int64_t rows = add.shape().dim(0), cols = add.shape().dim(1);
  return [=](const RunContext& rc) {
    k::addScatter(rc.as<float>(a), rc.as<float>(dy), rc.as<int32_t>(idx), rc.as<float>(y), n_idx, rows, cols);
  };
}

// A quant_params node P fuses into the quantize Q of the same operand when P computes
// the scales just in time (no amax history or prediction) of an integer format without
// clipping, with scales along the rows (the layout quantizeDynamic reads in one pass), Q
// is P's only quantize and in the same format but for rounding (which the
// scales do not read), and every other reader of P (the qmatmul) runs after Q.
void CpuBackend::planFusedScales(std::span<const Node* const> schedule) {
  fused_params_.clear();
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < schedule.size(); ++i) position[schedule[i]] = i;
  auto sameAttr = [](const Node& a, const Node& b, AttrKey key) {
    return a.attrs().getIntsOr(key, {}) == b.attrs().getIntsOr(key, {});
  };
  for (const Node* p : schedule) {
    auto intAttr = [&](AttrKey key) { return p->attrs().has(key) ? p->attrs().getInt(key) : 0; };
    if (p->op() != Op::kQuantParams || intAttr(AttrKey::kAmaxHistory) > 0 || intAttr(AttrKey::kPredictScale) != 0)
      continue;
    const k::QuantFormat format = p->attrs().getFormat(AttrKey::kFormat);
    if (format.isEmulated() || format.clipping != Clipping::kNone) continue;
    const k::OperandView view = quantView(*p);
    if (!view.contract_along_cols || format.granularity == Granularity::kPerTensor) continue;
    const Node* quantize = nullptr;
    int quantizes = 0;
    for (const Node* user : p->users()) {
      if (user->op() != Op::kQuantize || !position.count(user)) continue;
      ++quantizes;
      quantize = user;
    }
    if (quantizes != 1 || quantize->operand(0) != p->operand(0) || quantize->operand(1) != p ||
        !sameAttr(*p, *quantize, AttrKey::kContractDims) || !sameAttr(*p, *quantize, AttrKey::kBatchDims))
      continue;
    k::QuantFormat q_format = quantize->attrs().getFormat(AttrKey::kFormat);
    q_format.rounding = format.rounding;
    if (!(q_format == format)) continue;
    bool after = true;
    for (const Node* user : p->users())
      if (user != quantize && position.count(user)) after = after && position.at(user) > position.at(quantize);
    if (after) fused_params_.insert(p);
  }
}

void CpuBackend::planBuckets(std::span<const Node* const> schedule) {
  seats_.clear();
  const size_t bucket_bytes = bucketBytes();
  if (collectives_->size(DeviceGroup::kData) == 1 || bucket_bytes == 0) return;
  std::shared_ptr<Bucket> open;
  size_t open_bytes = 0;
  const Node* previous = nullptr;
  for (const Node* n : schedule) {
    if (n->op() != Op::kAllReduce || n->attrs().getGroup(AttrKey::kGroup) != DeviceGroup::kData ||
        !n->users().empty() || n->dtype() != DType::kF32)
      continue;
    const size_t bytes = static_cast<size_t>(n->shape().numElements()) * sizeof(float);
    if (open && open_bytes + bytes > bucket_bytes) {
      seats_[previous].last = true;
      open.reset();
    }
    if (!open) {
      open = std::make_shared<Bucket>();
      open_bytes = 0;
    }
    open->size += 1;
    open_bytes += bytes;
    seats_[n] = {open, false};
    previous = n;
  }
  if (previous) seats_[previous].last = true;
}

Kernel CpuBackend::lowerCollective(const Node& node, LoweringContext& ctx) const {
  Collectives* comm = collectives_;
  const DeviceGroup group = node.attrs().getGroup(AttrKey::kGroup);
  const int x = ctx.operand(0).slot;
  const int y = ctx.result();
  if (auto seat = seats_.find(&node); seat != seats_.end()) {
    const int64_t n = node.shape().numElements();
    const bool mean = node.attrs().getReduction(AttrKey::kReduce) == Reduction::kMean;
    std::shared_ptr<Bucket> bucket = seat->second.bucket;
    const bool last = seat->second.last;
    return [=](const RunContext& rc) {
      float* out = rc.as<float>(y);
      if (rc.as<float>(x) != out) std::memcpy(out, rc.as<float>(x), static_cast<size_t>(n) * sizeof(float));
      if (bucket->members.size() == bucket->size) bucket->members.clear();  // a run that stopped midway
      bucket->members.emplace_back(out, n);
      if (!last) return;
      PGQ_ASSERT(bucket->members.size() == bucket->size, "gradient bucket with {} of its {} members",
                 bucket->members.size(), bucket->size);
      int64_t total = 0;
      for (const auto& [ptr, count] : bucket->members) total += count;
      float* data = bucket->members.front().first;
      if (bucket->members.size() > 1) {
        bucket->packed.resize(static_cast<size_t>(total));
        data = bucket->packed.data();
        int64_t at = 0;
        for (const auto& [ptr, count] : bucket->members) {
          std::memcpy(data + at, ptr, static_cast<size_t>(count) * sizeof(float));
          at += count;
        }
      }
      comm->allReduceSum(data, total, DeviceGroup::kData);
      const float scale = mean ? 1.0f / static_cast<float>(comm->size(DeviceGroup::kData)) : 1.0f;
      int64_t at = 0;
      for (const auto& [ptr, count] : bucket->members) {
        for (int64_t i = 0; i < count; ++i) ptr[i] = data[at + i] * scale;
        at += count;
      }
      bucket->members.clear();
    };
  }
  if (node.op() == Op::kAllReduce) {
    const int64_t n = node.shape().numElements();
    const bool mean = node.attrs().getReduction(AttrKey::kReduce) == Reduction::kMean;
    return [=](const RunContext& rc) {
      float* out = rc.as<float>(y);
      if (rc.as<float>(x) != out) std::memcpy(out, rc.as<float>(x), static_cast<size_t>(n) * sizeof(float));
      comm->allReduceSum(out, n, group);
      const int size = comm->size(group);
      if (mean && size > 1) {
        const float inv = 1.0f / static_cast<float>(size);
        for (int64_t i = 0; i < n; ++i) out[i] *= inv;
      }
    };
  }
  const int64_t devices = node.attrs().getInt(AttrKey::kDevices);  // the group's size (supportsCollective)
  // The layout of this device's block of the split value.
  const PartLayout l = partLayout(node.op() == Op::kAllGather ? node.operand(0)->shape() : node.shape(),
                                  node.attrs().getInt(AttrKey::kAxis), devices);
  const int64_t count = l.blockElements();
  const int scratch = l.outer > 1 && node.op() != Op::kShard
                          ? ctx.scratch(static_cast<size_t>(count * devices) * sizeof(float))
                          : -1;
  switch (node.op()) {
    case Op::kAllGather:
      return [=](const RunContext& rc) {
        if (scratch < 0) return comm->allGather(rc.as<float>(x), rc.as<float>(y), count, group);
        comm->allGather(rc.as<float>(x), rc.as<float>(scratch), count, group);
        fromPartMajor(l, rc.as<float>(scratch), rc.as<float>(y));
      };
    case Op::kReduceScatter:
      return [=](const RunContext& rc) {
        const float* in = rc.as<float>(x);
        if (scratch >= 0) {
          toPartMajor(l, in, rc.as<float>(scratch));
          in = rc.as<float>(scratch);
        }
        comm->reduceScatterSum(in, rc.as<float>(y), count, group);
      };
    case Op::kShard:  // this device's block
      return [=](const RunContext& rc) { copyBlock(l, rc.as<float>(x), comm->rank(group), rc.as<float>(y)); };
    default: notInFamily(node, "collective");
  }
}

// parameter and input: their slots hold what the caller binds, so nothing runs (the
// executor does not even lower them). constant: filled with its value.
Kernel CpuBackend::lowerGraphInterface(const Node& node, LoweringContext& ctx) const {
  if (node.op() != Op::kConstant) return [](const RunContext&) {};
  int y = ctx.result();
  int64_t n = node.shape().numElements();
  float value = static_cast<float>(node.attrs().getFloat(AttrKey::kValue));
  return [=](const RunContext& rc) { k::fill(rc.as<float>(y), n, value); };
}

Kernel CpuBackend::lowerElementwise(const Node& node, LoweringContext& ctx) const {
  const Op op = node.op();
  if (auto it = scatter_adds_.find(&node); it != scatter_adds_.end()) return lowerAddScatter(node, *it->second, ctx);
  if (std::optional<k::BinaryOp> binary = binaryOp(op)) return lowerBinary(node, ctx, *binary);
  int y = ctx.result();
  int x = ctx.operand(0).slot;
  int64_t n = node.shape().numElements();
  if (std::optional<k::UnaryOp> unary = unaryOp(op)) {
    k::UnaryOp u = *unary;
    return [=](const RunContext& rc) { k::unary(u, rc.as<float>(x), rc.as<float>(y), n); };
  }
  int x1 = ctx.operand(1).slot;
  switch (op) {
    case Op::kReluGrad:
      return [=](const RunContext& rc) { k::reluGrad(rc.as<float>(x), rc.as<float>(x1), rc.as<float>(y), n); };
    case Op::kGeluGrad:
      return [=](const RunContext& rc) { k::geluGrad(rc.as<float>(x), rc.as<float>(x1), rc.as<float>(y), n); };
    case Op::kSiluGrad:
      return [=](const RunContext& rc) { k::siluGrad(rc.as<float>(x), rc.as<float>(x1), rc.as<float>(y), n); };
    case Op::kGeluErfGrad:
      return [=](const RunContext& rc) { k::geluErfGrad(rc.as<float>(x), rc.as<float>(x1), rc.as<float>(y), n); };
    case Op::kSwiglu:
      return [=](const RunContext& rc) { k::swiglu(rc.as<float>(x), rc.as<float>(x1), rc.as<float>(y), n); };
    case Op::kSwigluGrad: {
      int x2 = ctx.operand(2).slot;
      const k::SwigluOperand wrt = node.attrs().getOperand(AttrKey::kWrt) == GemmOperand::kLhs
                                       ? k::SwigluOperand::kGate
                                       : k::SwigluOperand::kUp;
      return [=](const RunContext& rc) {
        k::swigluGrad(wrt, rc.as<float>(x), rc.as<float>(x1), rc.as<float>(x2), rc.as<float>(y), n);
      };
    }
    case Op::kSelect: {
      int x2 = ctx.operand(2).slot;
      return [=](const RunContext& rc) {
        k::select(rc.as<float>(x), rc.as<float>(x1), rc.as<float>(x2), rc.as<float>(y), n);
      };
    }
    default: notInFamily(node, "elementwise");
  }
}

Kernel CpuBackend::lowerLayout(const Node& node, LoweringContext& ctx) const {
  int y = ctx.result();
  int x = ctx.operand(0).slot;
  const Shape& in = node.operand(0)->shape();
  std::vector<int64_t> x_dims(in.dims().begin(), in.dims().end());
  switch (node.op()) {
    // The executor gives a reshape its operand's buffer (and does not lower it); in a
    // buffer of its own it is a copy.
    case Op::kReshape: {
      size_t bytes = static_cast<size_t>(node.shape().numElements()) * dtypeSize(node.dtype());
      return [=](const RunContext& rc) {
        if (rc.ptr(x) != rc.ptr(y)) std::memcpy(rc.ptr(y), rc.ptr(x), bytes);
      };
    }
    case Op::kTranspose: {
      std::vector<int64_t> perm = node.attrs().getInts(AttrKey::kPerm);
      return [=](const RunContext& rc) { k::transpose(rc.as<float>(x), rc.as<float>(y), x_dims, perm); };
    }
    case Op::kSlice: {
      std::vector<int64_t> y_dims(node.shape().dims().begin(), node.shape().dims().end());
      std::vector<int64_t> starts = node.attrs().getInts(AttrKey::kStarts);
      return [=](const RunContext& rc) { k::slice(rc.as<float>(x), rc.as<float>(y), x_dims, starts, y_dims); };
    }
    case Op::kPad: {
      std::vector<int64_t> low = node.attrs().getInts(AttrKey::kLow);
      std::vector<int64_t> high = node.attrs().getInts(AttrKey::kHigh);
      return [=](const RunContext& rc) { k::pad(rc.as<float>(x), rc.as<float>(y), x_dims, low, high); };
    }
    case Op::kConcat: {
      int x1 = ctx.operand(1).slot;
      const int axis = static_cast<int>(node.attrs().getInt(AttrKey::kAxis));
      int64_t outer = 1;
      for (int d = 0; d < axis; ++d) outer *= node.shape().dim(d);
      const Shape& b = node.operand(1)->shape();
      int64_t a_inner = outer == 0 ? 0 : in.numElements() / outer;
      int64_t b_inner = outer == 0 ? 0 : b.numElements() / outer;
      return [=](const RunContext& rc) {
        k::concat(rc.as<float>(x), rc.as<float>(x1), rc.as<float>(y), outer, a_inner, b_inner);
      };
    }
    case Op::kBroadcast: {
      BroadcastCopy copy = broadcastCopy(in, node.shape(), node.attrs().getInts(AttrKey::kDims));
      return [=](const RunContext& rc) { copy.run(rc.as<float>(x), rc.as<float>(y)); };
    }
    default: notInFamily(node, "layout");
  }
}

Kernel CpuBackend::lowerAttentionAndNorm(const Node& node, LoweringContext& ctx) const {
  const Op op = node.op();
  int y = ctx.result();
  int x = ctx.operand(0).slot;
  int x1 = node.numOperands() > 1 ? ctx.operand(1).slot : -1;
  const Shape& s = node.shape();
  switch (op) {
    case Op::kSoftmax: {
      if (item_quantizations_.count(&node)) return lowerSoftmaxQuantizingItems(node, ctx);
      int64_t rows = rowsOf(node), cols = lastDim(node);
      const k::SoftmaxPrologue prologue = softmaxPrologue(node);
      return [=](const RunContext& rc) { k::softmax(rc.as<float>(x), rc.as<float>(y), rows, cols, prologue); };
    }
    case Op::kSoftmaxGrad: {
      if (item_quantizations_.count(&node)) return lowerSoftmaxQuantizingItems(node, ctx);
      int64_t rows = rowsOf(node), cols = lastDim(node);
      const k::SoftmaxPrologue prologue = softmaxPrologue(node);
      return [=](const RunContext& rc) {
        k::softmaxGrad(rc.as<float>(x), rc.as<float>(x1), rc.as<float>(y), rows, cols, prologue);
      };
    }
    case Op::kCausalMask: {
      int64_t tq = s.dim(s.rank() - 2), tk = s.dim(s.rank() - 1), batch = s.numElements() / (tq * tk);
      float value = static_cast<float>(node.attrs().getFloat(AttrKey::kValue));
      return [=](const RunContext& rc) { k::causalMask(rc.as<float>(x), rc.as<float>(y), batch, tq, tk, value); };
    }
    case Op::kRope: {
      // The angles depend only on the shape and theta: computed once here, not per run.
      auto table = std::make_shared<const k::RopeTable>(
          k::ropeTable(s.dim(2), s.dim(3), node.attrs().getFloat(AttrKey::kTheta)));
      int64_t rows = s.dim(0) * s.dim(1);
      k::RopeRotation rotation = node.attrs().getRotation(AttrKey::kRotation) == RopeRotation::kInverse
                                     ? k::RopeRotation::kInverse
                                     : k::RopeRotation::kForward;
      return [=](const RunContext& rc) { k::rope(rc.as<float>(x), rc.as<float>(y), rows, *table, rotation); };
    }
    case Op::kRmsNorm: case Op::kLayerNorm: case Op::kRmsNormGrad: case Op::kLayerNormGrad: {
      int64_t rows = rowsOf(node), cols = lastDim(node);
      float eps = static_cast<float>(node.attrs().getFloat(AttrKey::kEps));
      if (op == Op::kRmsNorm)
        return [=](const RunContext& rc) { k::rmsNorm(rc.as<float>(x), rc.as<float>(y), rows, cols, eps); };
      if (op == Op::kLayerNorm)
        return [=](const RunContext& rc) { k::layerNorm(rc.as<float>(x), rc.as<float>(y), rows, cols, eps); };
      if (op == Op::kRmsNormGrad)
        return [=](const RunContext& rc) {
          k::rmsNormGrad(rc.as<float>(x), rc.as<float>(x1), rc.as<float>(y), rows, cols, eps);
        };
      return [=](const RunContext& rc) {
        k::layerNormGrad(rc.as<float>(x), rc.as<float>(x1), rc.as<float>(y), rows, cols, eps);
      };
    }
    default: notInFamily(node, "attention and normalization");
  }
}

Kernel CpuBackend::lowerEmbeddingAndLoss(const Node& node, LoweringContext& ctx) const {
  int y = ctx.result();
  int x = ctx.operand(0).slot, x1 = ctx.operand(1).slot;
  switch (node.op()) {
    case Op::kGather: {
      const Shape& table = node.operand(0)->shape();
      int64_t n_idx = node.operand(1)->shape().numElements();
      int64_t rows = table.dim(0), cols = table.dim(1);
      return [=](const RunContext& rc) {
        k::gather(rc.as<float>(x), rc.as<int32_t>(x1), rc.as<float>(y), n_idx, rows, cols);
      };
    }
    case Op::kScatterAdd: {
      int64_t n_idx = node.operand(1)->shape().numElements();
      int64_t rows = node.shape().dim(0), cols = node.shape().dim(1);
      return [=](const RunContext& rc) {
        k::scatterAdd(rc.as<float>(x), rc.as<int32_t>(x1), rc.as<float>(y), n_idx, rows, cols);
      };
    }
    case Op::kCrossEntropy: {
      int64_t rows = node.operand(0)->shape().dim(0), cols = node.operand(0)->shape().dim(1);
      return [=](const RunContext& rc) {
        *rc.as<float>(y) = k::crossEntropy(rc.as<float>(x), rc.as<int32_t>(x1), rows, cols);
      };
    }
    case Op::kCrossEntropyGrad: {
      int x2 = ctx.operand(2).slot;
      int64_t rows = node.shape().dim(0), cols = node.shape().dim(1);
      return [=](const RunContext& rc) {
        k::crossEntropyGrad(rc.as<float>(x), rc.as<int32_t>(x1), *rc.as<float>(x2), rc.as<float>(y), rows, cols);
      };
    }
    default: notInFamily(node, "embedding and loss");
  }
}

Kernel CpuBackend::lowerQuantization(const Node& node, LoweringContext& ctx) const {
  switch (node.op()) {
    case Op::kQuantStats: return lowerQuantStats(node, ctx);
    case Op::kErrorStats: return lowerErrorStats(node, ctx);
    case Op::kSmoothScales: return lowerSmoothScales(node, ctx);
    case Op::kQuantParams: case Op::kQuantize: case Op::kFakeQuant: return lowerQuantize(node, ctx);
    case Op::kQMatMul: return lowerQMatMul(node, ctx);
    default: notInFamily(node, "quantization");
  }
}

// One lowering per family (familyOf); supports() decides on the same families, so a
// node it accepts always lowers.
Kernel CpuBackend::lower(const Node& node, LoweringContext& ctx) const {
  std::string why;
  if (!supports(node, &why))
    throw Error(fmt::format("cpu backend: unsupported node %{} ({}): {}", node.name(), opName(node.op()), why));
  switch (familyOf(node.op())) {
    case OpFamily::kGraphInterface: return lowerGraphInterface(node, ctx);
    case OpFamily::kElementwise: return lowerElementwise(node, ctx);
    case OpFamily::kConvert: return lowerConvert(node, ctx);
    case OpFamily::kLayout: return lowerLayout(node, ctx);
    case OpFamily::kReduction: return lowerReduce(node, ctx);
    case OpFamily::kAttentionAndNorm: return lowerAttentionAndNorm(node, ctx);
    case OpFamily::kEmbeddingAndLoss: return lowerEmbeddingAndLoss(node, ctx);
    case OpFamily::kGemm: return lowerMatMul(node, ctx);
    case OpFamily::kQuantization: return lowerQuantization(node, ctx);
    case OpFamily::kCollective: return lowerCollective(node, ctx);
  }
  throw InternalError(fmt::format("cpu backend: %{} ({}) has no op family", node.name(), opName(node.op())));
}

}  // namespace

std::unique_ptr<Backend> makeCpuBackend(Collectives* collectives) {
  // Without a job's collectives, a process is a group of one.
  static std::unique_ptr<Collectives> local = makeLocalCollectives();
  return std::make_unique<CpuBackend>(collectives ? collectives : local.get());
}

}  // namespace pgq
