#include "passes/quantized_gemm.h"

#include <numeric>

#include "ir/dot_dims.h"
#include "support/errors.h"

namespace pgq {

Node* QuantizedGemmBuilder::readable(Node* value, GemmOperand side, std::vector<int64_t>& contract,
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
  value = b_.transpose(value, perm, fmt::format("{}.{}_t", name_, side));
  int64_t nb = static_cast<int64_t>(batch.size()), nf = static_cast<int64_t>(free.size());
  std::iota(batch.begin(), batch.end(), 0);
  std::iota(contract.begin(), contract.end(), nb + nf);
  return value;
}

void QuantizedGemmBuilder::smooth(Node*& lhs, Node*& rhs, const DotDims& dims, double alpha) {
  Attrs a;
  dims.toAttrs(a);
  a.set(AttrKey::kAlpha, alpha);
  Node* s = b_.create(Op::kSmoothScales, {lhs, rhs}, std::move(a), std::nullopt, name_ + ".smooth");
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
  lhs = b_.div(lhs, spread(lhs, dims.lhs_contract), name_ + ".lhs_smoothed");
  rhs = b_.mul(rhs, spread(rhs, dims.rhs_contract), name_ + ".rhs_smoothed");
}

QuantizedGemmBuilder::QuantizedOperand QuantizedGemmBuilder::quantize(Node* gemm, const GemmDecision& d, Node* value,
                                                                      GemmOperand side, const QuantFormat& format,
                                                                      const std::vector<int64_t>& contract,
                                                                      const std::vector<int64_t>& batch) {
  Attrs a;
  a.set(AttrKey::kFormat, format);
  a.set(AttrKey::kSide, side);
  a.set(AttrKey::kContractDims, contract);
  if (!batch.empty()) a.set(AttrKey::kBatchDims, batch);
  Attrs pa = a;
  const bool weight = gemm->attrs().has(AttrKey::kRoles) &&
                      gemm->attrs().getRoles(AttrKey::kRoles)[static_cast<size_t>(side)] == OperandRole::kWeight;
  if (d.predict_weight_scale && weight) {
    if (!format.isEmulated() || format.granularity != Granularity::kPerTensor)
      throw Error(fmt::format("GEMM '{}': predict_weight_scale needs a per-tensor FP8/MX format on its weight, got {}",
                              gemm->attrs().getStringOr(AttrKey::kLabel, gemm->name()), format.toString()));
    pa.set(AttrKey::kPredictScale, int64_t{1});
  } else if (d.amax_history > 0) {
    pa.set(AttrKey::kAmaxHistory, d.amax_history);
    pa.set(AttrKey::kAmaxCompute, d.amax_compute);
  }
  Node* params = b_.create(Op::kQuantParams, {value}, std::move(pa), std::nullopt,
                           fmt::format("{}.{}_scales", name_, side));
  // Round to nearest draws no noise: every such node takes seed 0, so that cse merges the
  // identical quantizations of one value by several GEMMs (q, k and v of one input). The
  // stochastic ones keep their own streams, numbered as if every node took one.
  const int64_t seed = seed_ + next_seed_++;
  a.set(AttrKey::kSeed, format.rounding == Rounding::kStochastic ? seed : int64_t{0});
  if (format.isEmulated()) {
    // FP8 / MX: the values the format represents, in f32, for an f32 GEMM.
    Node* q = b_.create(Op::kFakeQuant, {value, params}, a, std::nullopt, fmt::format("{}.{}_fq", name_, side));
    return {params, q};
  }
  Node* q = b_.create(Op::kQuantize, {value, params}, a, std::nullopt, fmt::format("{}.{}_q", name_, side));
  return {params, q};
}

Node* QuantizedGemmBuilder::bf16Operand(Node* gemm, const QuantFormat& format, GemmOperand side) {
  Node* value = gemm->operand(static_cast<int>(side));
  if (value->dtype() == DType::kBF16) {
    // Under --precision bf16 the GEMM already reads a conversion: round its f32 source.
    if (format.rounding == Rounding::kNearest) return value;
    value = value->operand(0);
  }
  if (format.rounding == Rounding::kStochastic) {
    // The bf16 values stochastic rounding picks, in f32 (the conversion below is then
    // exact). One scale for the tensor makes it elementwise: any dim may be the
    // contracting one of the view, the last is.
    Attrs a;
    a.set(AttrKey::kFormat, format);
    a.set(AttrKey::kSide, side);
    a.set(AttrKey::kContractDims, std::vector<int64_t>{value->shape().rank() - 1});
    Node* params = b_.create(Op::kQuantParams, {value}, a, std::nullopt, fmt::format("{}.{}_scales", name_, side));
    a.set(AttrKey::kSeed, seed_ + next_seed_++);
    value = b_.create(Op::kFakeQuant, {value, params}, a, std::nullopt, fmt::format("{}.{}_fq", name_, side));
  }
  return b_.convert(value, DType::kBF16, fmt::format("{}.{}_bf16", name_, side));
}

Node* QuantizedGemmBuilder::build(Node* gemm, const GemmDecision& d, Attrs attrs, const std::string& name) {
  name_ = name;
  if (d.lhs_format.element == Element::kBf16 && d.rhs_format.element == Element::kBf16) {
    // A bf16 GEMM (f32 accumulation) reading both operands converted: no scales, no
    // transposes (any dims read), no SmoothQuant (bf16 keeps every channel's range).
    Node* lhs = bf16Operand(gemm, d.lhs_format, GemmOperand::kLhs);
    Node* rhs = bf16Operand(gemm, d.rhs_format, GemmOperand::kRhs);
    // The GEMM's own dims (a caller may pass no tags, as stage (i)'s output-error copies do).
    DotDims::fromAttrs(gemm->attrs()).toAttrs(attrs);
    attrs.set(AttrKey::kLhsFormat, d.lhs_format);
    attrs.set(AttrKey::kRhsFormat, d.rhs_format);
    return b_.create(Op::kMatMul, {lhs, rhs}, std::move(attrs), std::nullopt, name_ + ".bf16");
  }
  DotDims dims = DotDims::fromAttrs(gemm->attrs());
  Node* lhs = readable(gemm->operand(0), GemmOperand::kLhs, dims.lhs_contract, dims.lhs_batch);
  Node* rhs = readable(gemm->operand(1), GemmOperand::kRhs, dims.rhs_contract, dims.rhs_batch);
  if (d.smooth > 0) smooth(lhs, rhs, dims, d.smooth);
  QuantizedOperand ql = quantize(gemm, d, lhs, GemmOperand::kLhs, d.lhs_format, dims.lhs_contract, dims.lhs_batch);
  QuantizedOperand qr = quantize(gemm, d, rhs, GemmOperand::kRhs, d.rhs_format, dims.rhs_contract, dims.rhs_batch);
  for (AttrKey k : {AttrKey::kLhsContract, AttrKey::kRhsContract, AttrKey::kLhsBatch, AttrKey::kRhsBatch})
    attrs.erase(k);
  dims.toAttrs(attrs);
  attrs.set(AttrKey::kLhsFormat, d.lhs_format);
  attrs.set(AttrKey::kRhsFormat, d.rhs_format);
  if (d.lhs_format.isEmulated() != d.rhs_format.isEmulated())
    throw Error(fmt::format("GEMM '{}': formats {} and {} mix an int8 operand with an emulated (FP8/MX) one; use "
                            "two int8 or two FP8/MX formats",
                            gemm->attrs().getStringOr(AttrKey::kLabel, gemm->name()), d.lhs_format.toString(),
                            d.rhs_format.toString()));
  // An emulated GEMM: the f32 matmul itself, reading the fake-quantized operands.
  if (d.lhs_format.isEmulated())
    return b_.create(Op::kMatMul, {ql.values, qr.values}, std::move(attrs), std::nullopt, name_ + ".emulated");
  return b_.create(Op::kQMatMul, {ql.values, qr.values, ql.params, qr.params}, std::move(attrs), std::nullopt,
                   name_ + ".int8");
}

}  // namespace pgq
