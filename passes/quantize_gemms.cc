#include "passes/quantize_gemms.h"

#include <map>
#include <numeric>

#include "ir/builder.h"
#include "ir/dot_dims.h"
#include "plan/recipe.h"
#include "support/errors.h"

namespace pgq {
namespace {

struct QuantizedOperand {
  Node* params;
  Node* values;
};

class Rewriter {
 public:
  Rewriter(Graph& graph, int64_t seed) : b_(graph), seed_(seed) {}

  void rewrite(Node* gemm, const GemmDecision& d);

 private:
  // The f32 value the GEMM reads as its `side` operand, in an order the int8 kernel can
  // read ([batch, free, contract] or [batch, contract, free]); `contract` and `batch`
  // are updated when a transpose is inserted.
  Node* readable(Node* gemm, Node* value, GemmOperand side, std::vector<int64_t>& contract,
                 std::vector<int64_t>& batch);
  // SmoothQuant: a / s and b * s along the contracting dims.
  void smooth(Node* gemm, Node*& lhs, Node*& rhs, const DotDims& dims, double alpha);
  QuantizedOperand quantize(Node* gemm, Node* value, GemmOperand side, const QuantFormat& format,
                            const std::vector<int64_t>& contract, const std::vector<int64_t>& batch);

  Builder b_;
  int64_t seed_;
  // Delayed scaling of the GEMM being rewritten (0: just in time).
  int64_t amax_history_ = 0;
  std::string amax_compute_ = "max";
  bool predict_weight_scale_ = false;
  int64_t next_seed_ = 0;
};

Node* Rewriter::readable(Node* gemm, Node* value, GemmOperand side, std::vector<int64_t>& contract,
                         std::vector<int64_t>& batch) {
  // Quantize what the bf16 cast rounds, not the rounded value: int8 is the precision.
  if (value->op() == Op::kConvert && value->operand(0)->dtype() == DType::kF32) value = value->operand(0);
  const int rank = value->shape().rank();
  if (operandOrder(rank, contract, batch) != OperandOrder::kNeedsPermute) return value;
  // Make the operand [batch, free, contract]; the dims renumber accordingly.
  std::vector<int64_t> free = freeDimsOf(rank, contract, batch);
  std::vector<int64_t> perm = batch;
  perm.insert(perm.end(), free.begin(), free.end());
  perm.insert(perm.end(), contract.begin(), contract.end());
  value = b_.transpose(value, perm, fmt::format("{}.{}_t", gemm->name(), side));
  int64_t nb = static_cast<int64_t>(batch.size()), nf = static_cast<int64_t>(free.size());
  std::iota(batch.begin(), batch.end(), 0);
  std::iota(contract.begin(), contract.end(), nb + nf);
  return value;
}

void Rewriter::smooth(Node* gemm, Node*& lhs, Node*& rhs, const DotDims& dims, double alpha) {
  Attrs a;
  dims.toAttrs(a);
  a.set(AttrKey::kAlpha, alpha);
  Node* s = b_.create(Op::kSmoothScales, {lhs, rhs}, std::move(a), std::nullopt, gemm->name() + ".smooth");
  // s is flat over the contracting dims (in pairing order); spread it over each operand.
  // In a readable order the contracting dims ascend, as broadcast needs.
  auto spread = [&](Node* value, const std::vector<int64_t>& contract) {
    Node* shaped = s;
    if (contract.size() > 1) {
      std::vector<int64_t> sizes;
      for (int64_t c : contract) sizes.push_back(value->shape().dim(static_cast<int>(c)));
      shaped = b_.reshape(s, Shape(sizes));
    }
    return b_.broadcast(shaped, value->shape(), contract);
  };
  lhs = b_.div(lhs, spread(lhs, dims.lhs_contract), gemm->name() + ".lhs_smoothed");
  rhs = b_.mul(rhs, spread(rhs, dims.rhs_contract), gemm->name() + ".rhs_smoothed");
}

QuantizedOperand Rewriter::quantize(Node* gemm, Node* value, GemmOperand side, const QuantFormat& format,
                                    const std::vector<int64_t>& contract, const std::vector<int64_t>& batch) {
  Attrs a;
  a.set(AttrKey::kFormat, format);
  a.set(AttrKey::kSide, side);
  a.set(AttrKey::kContractDims, contract);
  if (!batch.empty()) a.set(AttrKey::kBatchDims, batch);
  Attrs pa = a;
  const bool weight = gemm->attrs().has(AttrKey::kRoles) &&
                      gemm->attrs().getRoles(AttrKey::kRoles)[static_cast<size_t>(side)] == OperandRole::kWeight;
  if (predict_weight_scale_ && weight) {
    if (!format.isEmulated() || format.granularity != Granularity::kPerTensor)
      throw Error(fmt::format("GEMM '{}': predict_weight_scale needs a per-tensor FP8/MX format on its weight, got {}",
                              gemm->attrs().getStringOr(AttrKey::kLabel, gemm->name()), format.toString()));
    pa.set(AttrKey::kPredictScale, int64_t{1});
  } else if (amax_history_ > 0) {
    pa.set(AttrKey::kAmaxHistory, amax_history_);
    pa.set(AttrKey::kAmaxCompute, amax_compute_);
  }
  Node* params = b_.create(Op::kQuantParams, {value}, std::move(pa), std::nullopt,
                           fmt::format("{}.{}_scales", gemm->name(), side));
  a.set(AttrKey::kSeed, seed_ + next_seed_++);
  if (format.isEmulated()) {
    // FP8 / MX: the values the format represents, in f32, for an f32 GEMM.
    Node* q = b_.create(Op::kFakeQuant, {value, params}, a, std::nullopt, fmt::format("{}.{}_fq", gemm->name(), side));
    return {params, q};
  }
  Node* q = b_.create(Op::kQuantize, {value, params}, a, std::nullopt, fmt::format("{}.{}_q", gemm->name(), side));
  return {params, q};
}

void Rewriter::rewrite(Node* gemm, const GemmDecision& d) {
  amax_history_ = d.amax_history;
  amax_compute_ = d.amax_compute;
  predict_weight_scale_ = d.predict_weight_scale;
  DotDims dims = DotDims::fromAttrs(gemm->attrs());
  Node* lhs = readable(gemm, gemm->operand(0), GemmOperand::kLhs, dims.lhs_contract, dims.lhs_batch);
  Node* rhs = readable(gemm, gemm->operand(1), GemmOperand::kRhs, dims.rhs_contract, dims.rhs_batch);
  if (d.smooth > 0) smooth(gemm, lhs, rhs, dims, d.smooth);
  QuantizedOperand ql = quantize(gemm, lhs, GemmOperand::kLhs, d.lhs_format, dims.lhs_contract, dims.lhs_batch);
  QuantizedOperand qr = quantize(gemm, rhs, GemmOperand::kRhs, d.rhs_format, dims.rhs_contract, dims.rhs_batch);
  Attrs a = gemm->attrs();
  for (AttrKey k : {AttrKey::kLhsContract, AttrKey::kRhsContract, AttrKey::kLhsBatch, AttrKey::kRhsBatch}) a.erase(k);
  dims.toAttrs(a);
  a.set(AttrKey::kLhsFormat, d.lhs_format);
  a.set(AttrKey::kRhsFormat, d.rhs_format);
  if (d.lhs_format.isEmulated() != d.rhs_format.isEmulated())
    throw Error(fmt::format("GEMM '{}': formats {} and {} mix an int8 operand with an emulated (FP8/MX) one; use "
                            "two int8 or two FP8/MX formats",
                            gemm->attrs().getStringOr(AttrKey::kLabel, gemm->name()), d.lhs_format.toString(),
                            d.rhs_format.toString()));
  if (d.lhs_format.isEmulated()) {
    // An emulated GEMM: the f32 matmul itself, reading the fake-quantized operands.
    Node* mm = b_.create(Op::kMatMul, {ql.values, qr.values}, std::move(a), std::nullopt, gemm->name() + ".emulated");
    b_.graph().replaceAllUsesWith(gemm, mm);
    return;
  }
  Node* q = b_.create(Op::kQMatMul, {ql.values, qr.values, ql.params, qr.params}, std::move(a), std::nullopt,
                      gemm->name() + ".int8");
  b_.graph().replaceAllUsesWith(gemm, q);
}

}  // namespace

bool QuantizeGemms::run(Graph& graph, PassContext&) {
  if (!options_.recipe) throw Error("quantize_gemms needs a recipe (quantize_gemms{recipe=R.yaml})");
  std::map<std::string, GemmDecision> decisions;
  for (auto& [label, d] : resolveRecipe(*options_.recipe, graph)) decisions.emplace(label, std::move(d));
  Rewriter rewriter(graph, options_.seed);
  bool changed = false;
  for (Node* node : graph.postOrder()) {
    if (node->op() != Op::kMatMul) continue;
    auto it = decisions.find(node->attrs().getStringOr(AttrKey::kLabel, ""));
    if (it == decisions.end() || it->second.decision != Decision::kQuantize) continue;
    rewriter.rewrite(node, it->second);
    changed = true;
  }
  return changed;
}

}  // namespace pgq
