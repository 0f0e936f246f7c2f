#include "passes/instrument_stats.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "ir/builder.h"
#include "support/errors.h"

namespace pgq {
namespace {

void addAll(std::vector<QuantFormat>& into, const std::vector<std::string>& more) {
  for (const std::string& text : more) {
    QuantFormat format = QuantFormat::parse(text);
    if (std::find(into.begin(), into.end(), format) == into.end()) into.push_back(format);
  }
}

}  // namespace

bool InstrumentStats::run(Graph& graph, PassContext&) {
  for (const Node* node : graph.nodes())
    if (node->op() == Op::kQuantStats) return false;  // already instrumented
  // First gather, per (tensor, contracting dims, batch dims), the formats and uses;
  // then make one statistics node for each.
  struct Request {
    Node* value;
    std::vector<int64_t> contract, batch;
    std::vector<QuantFormat> formats;
    std::vector<std::string> uses;
  };
  std::vector<Request> requests;
  // Each request's index by its key: searching the requests made this pass quadratic
  // in the number of GEMMs.
  std::map<std::tuple<const Node*, std::vector<int64_t>, std::vector<int64_t>>, size_t> index;
  auto request = [&](Node* value, std::vector<int64_t> contract, std::vector<int64_t> batch,
                     const std::string& use, bool gradient) {
    // Under bf16 GEMMs the operand is a convert: profile the f32 value it rounds.
    if (value->op() == Op::kConvert && value->operand(0)->dtype() == DType::kF32) value = value->operand(0);
    auto [at, inserted] = index.try_emplace({value, contract, batch}, requests.size());
    if (inserted) requests.push_back({value, std::move(contract), std::move(batch), {}, {}});
    Request& r = requests[at->second];
    addAll(r.formats, options_.formats);
    if (gradient) addAll(r.formats, options_.gradient_formats);
    r.uses.push_back(use);
  };

  for (Node* node : graph.postOrder()) {
    if (node->op() != Op::kMatMul) continue;
    const Attrs& a = node->attrs();
    if (!a.has(AttrKey::kLabel) || !a.has(AttrKey::kRoles))
      throw Error(fmt::format("instrument_stats: matmul %{} has no label/roles; run tag_metadata first",
                              node->name()));
    const std::string& label = a.getString(AttrKey::kLabel);
    const OperandRoles& roles = a.getRoles(AttrKey::kRoles);
    const bool lhs_gradient = roles[0] == OperandRole::kGradient, rhs_gradient = roles[1] == OperandRole::kGradient;
    request(node->operand(0), a.getInts(AttrKey::kLhsContract), a.getIntsOr(AttrKey::kLhsBatch, {}),
            label + ":lhs", lhs_gradient);
    request(node->operand(1), a.getInts(AttrKey::kRhsContract), a.getIntsOr(AttrKey::kRhsBatch, {}),
            label + ":rhs", rhs_gradient);
    if (options_.outputs) {
      // A result has no contracting dim of its own; take its last dim, so each row gets
      // a scale like an activation entering the next GEMM.
      size_t nb = a.getIntsOr(AttrKey::kLhsBatch, {}).size();
      std::vector<int64_t> batch(nb);
      for (size_t i = 0; i < nb; ++i) batch[i] = static_cast<int64_t>(i);
      request(node, {node->shape().rank() - 1}, batch, label + ":out", lhs_gradient || rhs_gradient);
    }
  }
  if (requests.empty()) return false;
  Builder b(graph);
  int64_t seed = options_.seed;
  for (Request& r : requests) {
    Attrs a;
    a.set(AttrKey::kFormats, r.formats);
    a.set(AttrKey::kContractDims, r.contract);
    if (!r.batch.empty()) a.set(AttrKey::kBatchDims, r.batch);
    a.set(AttrKey::kUses, r.uses);
    a.set(AttrKey::kSeed, seed++);
    graph.addOutput(b.create(Op::kQuantStats, {r.value}, std::move(a), std::nullopt, r.value->name() + ".stats"));
  }
  return true;
}

}  // namespace pgq
