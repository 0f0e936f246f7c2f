#pragma once
// The quantized form of a GEMM, built beside it: what stage (iii) runs in place of the
// GEMM (quantize_gemms) and what stage (i) compares its result with (instrument_stats'
// output errors). For a matmul and a decision (formats and refinements, plan/recipe.h):
//
//   %pa = quant_params(%a) {format, side="lhs", contract_dims, batch_dims}   // scales
//   %qa = quantize(%a, %pa) {format, side="lhs", ..., seed}                   // u8
//   %pb, %qb likewise for the rhs (s8)
//   %y  = qmatmul(%qa, %qb, %pa, %pb) {dims, lhs_format, rhs_format, ...}     // s32 -> f32
//
// for integer formats, and fake_quant (the values the format represents, in f32) read
// by an f32 matmul for emulated FP8/MX formats (QuantFormat::isEmulated). Two bf16
// formats make a bf16 matmul (f32 accumulation) reading convert(%a, bf16): the GEMM the
// CPU runs in bf16 (AMX, AVX512-BF16), with a fake_quant first for stochastic rounding. Scales are
// computed every step along each operand's non-contracting dims, or from an amax
// history (delayed scaling) or the optimizer's step bound (predicted weight scales) as
// the decision says. With `smooth: alpha` the operands first go through SmoothQuant:
// %s = smooth_scales(%a, %b), then a / s and b * s along the contracting dims. An
// operand whose dims are not in an order the int8 kernel reads gets a transpose first;
// a bf16 operand is quantized from its f32 source.
#include <cstdint>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "plan/recipe.h"

namespace pgq {

class QuantizedGemmBuilder {
 public:
  // The quantize and fake_quant nodes take the stochastic-rounding seeds `seed`,
  // `seed` + 1, ... in the order they are built (lhs before rhs); round-to-nearest ones
  // take 0 instead (no noise), so that cse merges equal ones.
  QuantizedGemmBuilder(Graph& graph, int64_t seed) : b_(graph), seed_(seed) {}

  // Builds the quantized GEMM of matmul `gemm` under `d` (decision kQuantize) from the
  // values `gemm` reads, and returns its result; `gemm` and its users are left as they
  // are. The result carries `attrs` (e.g. the GEMM's tags) with its dims and formats
  // set; its nodes are named `name`.lhs_scales, `name`.int8, .... Throws pgq::Error
  // for formats that mix an int8 operand with an emulated one, and for predicted
  // scales on a weight whose format is not per-tensor FP8/MX.
  Node* build(Node* gemm, const GemmDecision& d, Attrs attrs, const std::string& name);
  // The seed the next quantize node would take.
  int64_t nextSeed() const { return seed_ + next_seed_; }

 private:
  struct QuantizedOperand {
    Node* params;
    Node* values;
  };

  // The f32 value the GEMM reads as its `side` operand, in an order the int8 kernel can
  // read ([batch, free, contract] or [batch, contract, free]); `contract` and `batch`
  // are updated when a transpose is inserted.
  Node* readable(Node* value, GemmOperand side, std::vector<int64_t>& contract, std::vector<int64_t>& batch);
  // SmoothQuant: a / s and b * s along the contracting dims.
  void smooth(Node*& lhs, Node*& rhs, const DotDims& dims, double alpha);
  // The bf16 value a bf16 GEMM reads as its `side` operand.
  Node* bf16Operand(Node* gemm, const QuantFormat& format, GemmOperand side);
  QuantizedOperand quantize(Node* gemm, const GemmDecision& d, Node* value, GemmOperand side,
                            const QuantFormat& format, const std::vector<int64_t>& contract,
                            const std::vector<int64_t>& batch);

  Builder b_;
  int64_t seed_;
  int64_t next_seed_ = 0;
  std::string name_;  // of the GEMM being built
};

}  // namespace pgq
