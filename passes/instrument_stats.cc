#include "passes/instrument_stats.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_set>

#include "ir/analysis.h"
#include "ir/builder.h"
#include "passes/quantized_gemm.h"
#include "support/errors.h"

namespace pgq {
namespace {

// `contract`: the operand's contracting length. A Hadamard transform needs a multiple of
// its block (kernels/hadamard.h); such formats are left out where it is not.
void addAll(std::vector<QuantFormat>& into, const std::vector<QuantFormat>& more, int64_t contract) {
  for (const QuantFormat& format : more) {
    if (format.hadamard && contract % kHadamardBlock != 0) continue;
    if (std::find(into.begin(), into.end(), format) == into.end()) into.push_back(format);
  }
}

// The quantized GEMMs whose result error is measured: per GEMM, the distinct (lhs, rhs)
// formats the pairs give it.
struct OutputError {
  Node* gemm;
  QuantFormat lhs, rhs;
  size_t index;  // among the GEMM's
};

void addOutputErrors(std::vector<OutputError>& into, Node* gemm, const OperandRoles& roles,
                     const std::vector<FormatPair>& pairs) {
  const size_t first = into.size();
  for (const FormatPair& pair : pairs) {
    auto side = [&](size_t i) { return roles[i] == OperandRole::kGradient ? pair.gradient : pair.operand; };
    OutputError e{gemm, side(0), side(1), into.size() - first};
    auto same = [&](const OutputError& o) { return o.lhs == e.lhs && o.rhs == e.rhs; };
    if (std::none_of(into.begin() + static_cast<std::ptrdiff_t>(first), into.end(), same)) into.push_back(e);
  }
}

}  // namespace

bool InstrumentStats::run(Graph& graph, PassContext&) {
  for (const Node* node : graph.nodes())
    if (isStatistics(*node)) return false;  // already instrumented
  for (const FormatPair& pair : options_.output_pairs)
    if (pair.operand.isEmulated() != pair.gradient.isEmulated())
      throw Error(fmt::format("instrument_stats: output pair {}/{} mixes an int8 format with an emulated (FP8/MX) "
                              "one; a GEMM with one operand of each cannot run",
                              pair.operand.toString(), pair.gradient.toString()));
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
    int64_t k = 1;
    for (int64_t d : r.contract) k *= r.value->shape().dim(static_cast<int>(d));
    addAll(r.formats, options_.formats, k);
    if (gradient) addAll(r.formats, options_.gradient_formats, k);
    r.uses.push_back(use);
  };

  std::vector<OutputError> output_errors;
  // A dead GEMM (left by a rewrite for dce) keeps its statistics, which read only its
  // operands; comparing its result would bring it back to life.
  const std::unordered_set<const Node*> live = liveNodes(graph);
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
    if (live.count(node)) addOutputErrors(output_errors, node, roles, options_.output_pairs);
  }
  if (requests.empty()) return false;
  const size_t gemm_requests = requests.size();
  // The embeddings' gradients are scatter-adds, not GEMMs; with the results profiled,
  // their norms too (the gradient reach of the first layer's data gradients, which flow
  // only into them, needs them). Their statistics take the last seeds, so that the
  // GEMMs' noise streams are those of a graph without them.
  if (options_.outputs)
    for (Node* node : graph.postOrder())
      if (node->op() == Op::kScatterAdd && live.count(node))
        request(node, {node->shape().rank() - 1}, {}, "scatter:" + node->name() + ":out", true);
  Builder b(graph);
  int64_t seed = options_.seed;
  auto statistics = [&](Request& r) {
    Attrs a;
    a.set(AttrKey::kFormats, r.formats);
    a.set(AttrKey::kContractDims, r.contract);
    if (!r.batch.empty()) a.set(AttrKey::kBatchDims, r.batch);
    a.set(AttrKey::kUses, r.uses);
    a.set(AttrKey::kSeed, seed++);
    if (options_.bias) a.set(AttrKey::kBias, int64_t{1});
    graph.addOutput(b.create(Op::kQuantStats, {r.value}, std::move(a), std::nullopt, r.value->name() + ".stats"));
  };
  for (size_t i = 0; i < gemm_requests; ++i) statistics(requests[i]);
  // The copies' stochastic-rounding streams follow the statistics nodes': independent
  // of those (and of each other).
  QuantizedGemmBuilder copies(graph, seed);
  for (const OutputError& e : output_errors) {
    GemmDecision d;
    d.decision = Decision::kQuantize;
    d.lhs_format = e.lhs;
    d.rhs_format = e.rhs;
    // No tags: the copy is no GEMM of the model.
    Node* copy = copies.build(e.gemm, d, Attrs{}, fmt::format("{}.q{}", e.gemm->name(), e.index));
    Attrs a;
    a.set(AttrKey::kLabel, e.gemm->attrs().getString(AttrKey::kLabel));
    a.set(AttrKey::kLhsFormat, e.lhs);
    a.set(AttrKey::kRhsFormat, e.rhs);
    graph.addOutput(b.create(Op::kErrorStats, {e.gemm, copy}, std::move(a), std::nullopt, e.gemm->name() + ".error"));
  }
  seed = copies.nextSeed();
  for (size_t i = gemm_requests; i < requests.size(); ++i) statistics(requests[i]);
  return true;
}

}  // namespace pgq
