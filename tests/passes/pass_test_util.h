#pragma once
// What several pass tests share: a two-GEMM MLP in the IR text form, the relative
// squared error between two outputs of the same computation, and the fusion passes'
// tests' helpers (a graph fused, counting ops, text edits, values compared).
#include <cmath>
#include <memory>
#include <span>
#include <string>

#include <gtest/gtest.h>

#include "ir/parser.h"
#include "passes/pipeline.h"
#include "runtime/reference.h"

namespace pgq::testing {

// x[64,32] -> up (w [32,48]) -> down (w2 [48,32]); GEMM labels "up" and "down".
inline const char* kMlp = R"(graph @mlp {
  %x = input() : f32[64,32]
  %w = parameter() : f32[32,48]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="up"} : f32[64,48]
  %w2 = parameter() : f32[48,32]
  %y = matmul(%h, %w2) {lhs_contract=[1], rhs_contract=[0], label="down"} : f32[64,32]
  return %y
}
)";

// sum (a - b)^2 / sum a^2: 0 when equal, 1/SQNR of b as an approximation of a.
inline double relativeSquaredError(std::span<const float> a, std::span<const float> b) {
  double err = 0, sig = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    sig += static_cast<double>(a[i]) * a[i];
  }
  return err / sig;
}

// A graph parsed twice, the second copy run through `pipeline` ("fuse_softmax,dce").
struct Fused {
  std::unique_ptr<Graph> before, after;
  bool changed = false;
};

inline Fused fuse(const std::string& text, const std::string& pipeline) {
  Fused f{parseGraph(text), parseGraph(text)};
  PassContext ctx;
  f.changed = parsePipeline(pipeline)->run(*f.after, ctx);
  return f;
}

inline int count(const Graph& g, Op op) {
  int n = 0;
  for (const Node* node : g.nodes()) n += node->op() == op;
  return n;
}

// `text` with the first `from` replaced by `to` (a test failure when there is none).
inline std::string replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

// Both graphs on the same random inputs (the reference evaluator, in f64): every output
// within `tolerance` relative.
inline void expectSameValues(const Fused& f, double tolerance) {
  ReferenceEvaluator ra(*f.before), rb(*f.after);
  uint64_t seed = 1;
  for (const Node* n : f.before->nodes()) {
    if (n->op() != Op::kParameter && n->op() != Op::kInput) continue;
    RefTensor v = randomRefTensor(n->type(), seed++);
    ra.setInput(n, v);
    rb.setInput(n->name(), v);
  }
  ra.run();
  rb.run();
  ASSERT_EQ(f.before->outputs().size(), f.after->outputs().size());
  for (size_t i = 0; i < f.before->outputs().size(); ++i) {
    const std::vector<double>& a = ra.output(i).data;
    const std::vector<double>& b = rb.output(i).data;
    ASSERT_EQ(a.size(), b.size());
    for (size_t j = 0; j < a.size(); ++j) ASSERT_NEAR(a[j], b[j], tolerance * (1 + std::abs(a[j]))) << i << " " << j;
  }
}

}  // namespace pgq::testing
