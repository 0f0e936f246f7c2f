#include "passes/quantize_gemms.h"

#include <map>
#include <numeric>

#include <spdlog/spdlog.h>

#include "ir/builder.h"
#include "ir/dot_dims.h"
#include "ir/errors.h"
#include "passes/recipe.h"
#include "passes/roofline_filter.h"

namespace pgq {
namespace {

struct QuantizedOperand {
  Node* params;
  Node* values;
};

class Rewriter {
 public:
  Rewriter(Graph& graph, PassContext& ctx) : b_(graph), ctx_(ctx) {}

  void rewrite(Node* gemm, const GemmDecision& d);

 private:
  // Quantizes `value` as the `side` operand of `gemm`; `contract` and `batch` are its
  // dims as the GEMM reads them (updated when a transpose is inserted).
  QuantizedOperand quantize(Node* gemm, Node* value, const std::string& side, const std::string& format,
                            std::vector<int64_t>& contract, std::vector<int64_t>& batch);

  Builder b_;
  PassContext& ctx_;
  int64_t next_seed_ = 0;
};

QuantizedOperand Rewriter::quantize(Node* gemm, Node* value, const std::string& side, const std::string& format,
                                    std::vector<int64_t>& contract, std::vector<int64_t>& batch) {
  // Quantize what the bf16 cast rounds, not the rounded value: int8 is the precision.
  if (value->op() == Op::kConvert && value->operand(0)->dtype() == DType::kF32) value = value->operand(0);
  const int rank = value->shape().rank();
  if (operandOrder(rank, contract, batch) == OperandOrder::kNeedsPermute) {
    // Make the operand [batch, free, contract]; the dims renumber accordingly.
    std::vector<int64_t> free = freeDimsOf(rank, contract, batch);
    std::vector<int64_t> perm = batch;
    perm.insert(perm.end(), free.begin(), free.end());
    perm.insert(perm.end(), contract.begin(), contract.end());
    value = b_.transpose(value, perm, gemm->name() + "." + side + "_t");
    int64_t nb = static_cast<int64_t>(batch.size()), nf = static_cast<int64_t>(free.size());
    std::iota(batch.begin(), batch.end(), 0);
    std::iota(contract.begin(), contract.end(), nb + nf);
  }
  Attrs a;
  a.set(AttrKey::kFormat, format);
  a.set(AttrKey::kSide, side);
  a.set(AttrKey::kContractDims, contract);
  if (!batch.empty()) a.set(AttrKey::kBatchDims, batch);
  Node* params = b_.create(Op::kQuantParams, {value}, a, std::nullopt, gemm->name() + "." + side + "_scales");
  a.set(AttrKey::kSeed, ctx_.sr_seed + next_seed_++);
  Node* q = b_.create(Op::kQuantize, {value, params}, a, std::nullopt, gemm->name() + "." + side + "_q");
  return {params, q};
}

void Rewriter::rewrite(Node* gemm, const GemmDecision& d) {
  DotDims dims = DotDims::fromAttrs(gemm->attrs());
  QuantizedOperand lhs = quantize(gemm, gemm->operand(0), "lhs", d.lhs_format, dims.lhs_contract, dims.lhs_batch);
  QuantizedOperand rhs = quantize(gemm, gemm->operand(1), "rhs", d.rhs_format, dims.rhs_contract, dims.rhs_batch);
  Attrs a = gemm->attrs();
  for (AttrKey k : {AttrKey::kLhsContract, AttrKey::kRhsContract, AttrKey::kLhsBatch, AttrKey::kRhsBatch}) a.erase(k);
  dims.toAttrs(a);
  a.set(AttrKey::kLhsFormat, d.lhs_format);
  a.set(AttrKey::kRhsFormat, d.rhs_format);
  Node* q = b_.create(Op::kQMatMul, {lhs.values, rhs.values, lhs.params, rhs.params}, std::move(a), std::nullopt,
                      gemm->name() + ".int8");
  b_.graph().replaceAllUsesWith(gemm, q);
}

}  // namespace

bool QuantizeGemms::run(Graph& graph, PassContext& ctx) {
  if (!ctx.recipe) throw Error("quantize_gemms needs a recipe (pgq train --recipe R.yaml)");
  std::map<std::string, GemmDecision> decisions;
  for (auto& [label, d] : resolveRecipe(*ctx.recipe, graph)) decisions.emplace(label, std::move(d));
  Rewriter rewriter(graph, ctx);
  bool changed = false;
  for (Node* node : graph.postOrder()) {
    if (node->op() != Op::kMatMul) continue;
    auto it = decisions.find(node->attrs().getStringOr(AttrKey::kLabel, ""));
    if (it == decisions.end() || !it->second.quantize) continue;
    if (rooflineRejects(*node, ctx.min_speedup))
      spdlog::warn("recipe quantizes {} although the roofline estimates int8 at {:.2f}x on this hardware",
                   it->first, node->attrs().getFloat(AttrKey::kEstSpeedup));
    rewriter.rewrite(node, it->second);
    changed = true;
  }
  return changed;
}

}  // namespace pgq
