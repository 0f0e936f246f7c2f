#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "ir/builder.h"
#include "ir/parser.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/layout.h"
#include "kernels/optim.h"
#include "kernels/quant_stats.h"
#include "kernels/quantize.h"
#include "passes/pipeline.h"
#include "passes/training_pipeline.h"
#include "plan/recipe.h"
#include "runtime/executor.h"
#include "runtime/memory_plan.h"
#include "runtime/reference.h"

namespace pgq {
namespace {

// An executor of g that times its kernels (profile() lists them), with the named
// inputs bound, after one run.
std::unique_ptr<Executor> runProfiled(const Graph& g, std::initializer_list<std::pair<const char*, Tensor*>> inputs) {
  ExecutorOptions options;
  options.profile = true;
  auto exec = std::make_unique<Executor>(g, options);
  for (const auto& [name, tensor] : inputs) exec->bind(name, *tensor);
  exec->run();
  return exec;
}

// Feeds the same random values to the executor and the reference evaluator.
struct BothRunners {
  explicit BothRunners(const Graph& g, uint64_t seed = 7) : ref(g), exec(g) {
    for (Node* node : g.nodes()) {
      if (node->op() != Op::kParameter && node->op() != Op::kInput) continue;
      RefTensor value = node->dtype() == DType::kS32
                            ? randomIndices(node->type(), indexBound(*node), seed++)
                            : randomRefTensor(node->type(), seed++, 0.5);
      // Both sides see exactly the values the f32 tensor holds.
      tensors.push_back(std::make_unique<Tensor>(toTensor(value)));
      ref.setInput(node, toRefTensor(*tensors.back()));
      exec.bind(node, *tensors.back());
    }
  }
  // Indices must stay inside the table they index (the smallest user table).
  static int64_t indexBound(const Node& node) {
    int64_t bound = 1 << 20;
    std::vector<const Node*> work{&node};
    while (!work.empty()) {
      const Node* n = work.back();
      work.pop_back();
      for (const Node* user : n->users()) {
        if (user->op() == Op::kGather) bound = std::min(bound, user->operand(0)->shape().dim(0));
        if (user->op() == Op::kScatterAdd) bound = std::min(bound, user->shape().dim(0));
        if (user->op() == Op::kCrossEntropy || user->op() == Op::kCrossEntropyGrad)
          bound = std::min(bound, user->operand(0)->shape().dim(1));
        if (user->op() == Op::kReshape) work.push_back(user);
      }
    }
    return bound;
  }
  void run() {
    ref.run();
    exec.run();
  }
  // max |fast - exact| / max(|exact|_inf, floor)
  double relError(size_t output) const {
    const Node* node = exec.outputNode(output);
    const RefTensor& exact = ref.output(output);
    Tensor fast(node->type());
    std::memcpy(fast.raw(), exec.outputData(output), fast.bytes());
    RefTensor got = toRefTensor(fast);
    double scale = 1e-6, err = 0;
    for (size_t i = 0; i < exact.data.size(); ++i) {
      scale = std::max(scale, std::abs(exact.data[i]));
      if (std::isnan(exact.data[i]) != std::isnan(got.data[i])) return INFINITY;
      if (!std::isnan(exact.data[i])) err = std::max(err, std::abs(exact.data[i] - got.data[i]));
    }
    return err / scale;
  }

  std::vector<std::unique_ptr<Tensor>> tensors;
  ReferenceEvaluator ref;
  Executor exec;
};

std::string readGolden(const std::string& name) {
  std::ifstream in(std::filesystem::path(PGQ_SOURCE_DIR) / "tests/ir/golden" / name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Executor, EveryOpMatchesTheReference) {
  auto g = parseGraph(readGolden("all_ops.pgq"));
  BothRunners runners(*g);
  runners.run();
  for (size_t i = 0; i < g->outputs().size(); ++i) {
    SCOPED_TRACE(g->outputs()[i]->name());
    EXPECT_LT(runners.relError(i), 2e-5);
  }
}

TEST(Executor, AttentionGraphMatchesTheReference) {
  auto g = parseGraph(readGolden("attention.pgq"));
  BothRunners runners(*g);
  runners.run();
  EXPECT_LT(runners.relError(0), 1e-5);
}

TEST(Executor, TinyTransformerLossAndGradientsMatchTheReference) {
  ModelConfig config = loadModelConfig("tiny");
  TransformerGraph t = buildTransformer(config);
  appendBackward(*t.graph, t.loss, t.params);
  BothRunners runners(*t.graph);
  runners.run();
  EXPECT_LT(runners.relError(0), 1e-6) << "loss";
  for (size_t i = 1; i < t.graph->outputs().size(); ++i) {
    SCOPED_TRACE(t.graph->outputs()[i]->name());
    EXPECT_LT(runners.relError(i), 1e-4);
  }
  MemoryStats mem = runners.exec.memory();
  EXPECT_GT(mem.arena_bytes, 0u);
  EXPECT_GT(mem.bound_bytes, 0u);
}

// Every way of laying out a 2-D or batched product, including dims that need a
// permute before oneDNN can read them.
TEST(Executor, MatMulLayouts) {
  struct Case {
    Shape lhs, rhs;
    DotDims dims;
  };
  std::vector<Case> cases = {
      {Shape{5, 7}, Shape{7, 3}, {{1}, {0}, {}, {}}},                  // [M,K]x[K,N]
      {Shape{7, 5}, Shape{7, 3}, {{0}, {0}, {}, {}}},                  // A^T (wgrad)
      {Shape{5, 7}, Shape{3, 7}, {{1}, {1}, {}, {}}},                  // B^T (dgrad)
      {Shape{7, 5}, Shape{3, 7}, {{0}, {1}, {}, {}}},                  // both
      {Shape{2, 5, 7}, Shape{7, 3}, {{2}, {0}, {}, {}}},               // M from two dims
      {Shape{2, 3, 5, 4}, Shape{2, 3, 6, 4}, {{3}, {3}, {0, 1}, {0, 1}}},  // attention scores
      {Shape{2, 3, 5, 6}, Shape{2, 3, 6, 4}, {{3}, {2}, {0, 1}, {0, 1}}},  // attention av
      {Shape{5, 2, 7}, Shape{2, 7, 3}, {{2}, {1}, {1}, {0}}},          // batch not leading: permute
      {Shape{4, 5, 6}, Shape{6, 4, 3}, {{0, 2}, {1, 0}, {}, {}}},      // two contracting dims
      {Shape{4, 5, 6}, Shape{4, 6, 3}, {{2, 0}, {1, 0}, {}, {}}},      // contracting order swapped
  };
  for (const Case& c : cases) {
    Graph g;
    Builder b(g);
    Node* x = b.parameter("x", {DType::kF32, c.lhs});
    Node* w = b.parameter("w", {DType::kF32, c.rhs});
    g.addOutput(b.matmul(x, w, c.dims));
    SCOPED_TRACE(c.lhs.toString() + " x " + c.rhs.toString());
    BothRunners runners(g);
    runners.run();
    EXPECT_LT(runners.relError(0), 1e-5);
  }
}

TEST(Executor, BroadcastsInPlaceAndMaterialized) {
  auto g = parseGraph(R"(graph @b {
  %x = parameter() : f32[3,4,5]
  %row = parameter() : f32[4,5]
  %col = parameter() : f32[3]
  %mid = parameter() : f32[4]
  %rb = broadcast(%row) {dims=[1,2]} : f32[3,4,5]
  %cb = broadcast(%col) {dims=[0]} : f32[3,4,5]
  %mb = broadcast(%mid) {dims=[1]} : f32[3,4,5]
  %a = add(%x, %rb) : f32[3,4,5]
  %m = mul(%cb, %a) : f32[3,4,5]
  %s = sub(%m, %mb) : f32[3,4,5]
  %e = exp(%rb) : f32[3,4,5]
  %kv = parameter() : f32[2,3,64,128]
  %heads = broadcast(%kv) {dims=[0,1,3,4]} : f32[2,3,2,64,128]
  %rows = parameter() : f32[300]
  %filled = broadcast(%rows) {dims=[0]} : f32[300,400]
  return %s, %e, %cb, %heads, %filled
}
)");
  BothRunners runners(*g);
  runners.run();
  for (size_t i = 0; i < 3; ++i) EXPECT_LT(runners.relError(i), 1e-6) << i;
  // Copies: exact. A GQA head broadcast (whole [64, 128] blocks) and rows filled with one
  // value, both large enough for several threads.
  for (size_t i = 3; i < 5; ++i) EXPECT_EQ(runners.relError(i), 0.0) << i;
}

TEST(Executor, ReductionsOverAnyAxes) {
  auto g = parseGraph(R"(graph @r {
  %x = parameter() : f32[3,4,5]
  %a = reduce_sum(%x) {axes=[0,2]} : f32[4]
  %b = reduce_max(%x) {axes=[1]} : f32[3,5]
  %c = reduce_mean(%x) {axes=[0,1,2]} : f32[]
  return %a, %b, %c
}
)");
  BothRunners runners(*g);
  runners.run();
  for (size_t i = 0; i < 3; ++i) EXPECT_LT(runners.relError(i), 1e-6) << i;
}

// Each importer op alone, on sizes that leave a partial vector (7 x 13 = 91 floats) and
// on one long enough for the unrolled loop (3 x 1001).
TEST(Executor, ImporterElementwiseOpsMatchTheReference) {
  for (Shape shape : {Shape{7, 13}, Shape{3, 1001}, Shape{5}}) {
    for (Op op : {Op::kSqrt, Op::kSigmoid, Op::kErf, Op::kSilu, Op::kGeluErf, Op::kSiluGrad,
                  Op::kGeluErfGrad, Op::kSelect}) {
      SCOPED_TRACE(fmt::format("{} {}", opName(op), shape.toString()));
      Graph g;
      Builder b(g);
      TensorType type{DType::kF32, shape};
      Node* x = b.parameter("x", type);
      Node* y = b.parameter("y", type);
      Node* out;
      if (op == Op::kSqrt) {
        out = b.unary(op, b.mul(x, x));
      } else if (op == Op::kSelect) {
        out = b.select(b.ge(x, b.constant(0.0, type)), x, y);
      } else if (opArity(op) == 1) {
        // Scaled up so that the data reach the tails (|x| up to ~8).
        out = b.unary(op, b.scale(x, 4.0));
      } else {
        out = b.binary(op, b.scale(x, 4.0), y);
      }
      g.addOutput(out);
      BothRunners runners(g);
      runners.run();
      EXPECT_LT(runners.relError(0), 1e-6);
    }
  }
}

TEST(Executor, SlicePadAndConcatMatchTheReference) {
  auto g = parseGraph(R"(graph @layout {
  %x = parameter() : f32[3,5,11]
  %y = parameter() : f32[3,2,11]
  %z = parameter() : f32[3,5,4]
  %inner = slice(%x) {starts=[1,1,3], limits=[3,4,10]} : f32[2,3,7]
  %rows = slice(%x) {starts=[1,0,0], limits=[2,5,11]} : f32[1,5,11]
  %whole = slice(%x) {starts=[0,0,0], limits=[3,5,11]} : f32[3,5,11]
  %padded = pad(%x) {low=[1,0,2], high=[0,3,5]} : f32[4,8,18]
  %flat = pad(%x) {low=[0,0,0], high=[0,0,0]} : f32[3,5,11]
  %c0 = concat(%x, %x) {axis=0} : f32[6,5,11]
  %c1 = concat(%x, %y) {axis=1} : f32[3,7,11]
  %c2 = concat(%x, %z) {axis=2} : f32[3,5,15]
  return %inner, %rows, %whole, %padded, %flat, %c0, %c1, %c2
}
)");
  BothRunners runners(*g);
  runners.run();
  // Data movement is exact.
  for (size_t i = 0; i < g->outputs().size(); ++i) EXPECT_EQ(runners.relError(i), 0.0) << i;
}

// Head dims with a vector tail (half 5) and whole vectors (half 32), positions past the
// parallel threshold, both rotations, and the gradient rule's inverse through autodiff.
TEST(Executor, RopeMatchesTheReference) {
  auto g = parseGraph(R"(graph @rope {
  %x = parameter() : f32[2,3,37,10]
  %y = parameter() : f32[1,2,300,64]
  %a = rope(%x) {theta=10000.0, rotation="forward"} : f32[2,3,37,10]
  %b = rope(%x) {theta=3.0, rotation="inverse"} : f32[2,3,37,10]
  %c = rope(%y) {theta=500000.0, rotation="forward"} : f32[1,2,300,64]
  return %a, %b, %c
}
)");
  BothRunners runners(*g);
  runners.run();
  for (size_t i = 0; i < g->outputs().size(); ++i) EXPECT_LT(runners.relError(i), 1e-6) << i;
}

// error_stats of two values: each of [sqnr, mean_square, mse] to f32 precision.
TEST(Executor, ErrorStatsMatchTheReference) {
  auto g = parseGraph(R"(graph @e {
  %x = parameter() : f32[300,70]
  %w = parameter() : f32[300,70]
  %d = mul(%w, %w) : f32[300,70]
  %y = add(%x, %d) : f32[300,70]
  %e = error_stats(%x, %y) {label="g", lhs_format="int8:channel:rtn", rhs_format="int8:channel:rtn"} : f32[3]
  %same = error_stats(%x, %x) {label="g", lhs_format="int8:channel:rtn", rhs_format="int8:channel:rtn"} : f32[3]
  return %e, %same
}
)");
  BothRunners runners(*g);
  runners.run();
  for (size_t out = 0; out < 2; ++out) {
    std::span<const float> got = runners.exec.output<float>(out);
    const RefTensor& exact = runners.ref.output(out);
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], exact.data[i], 1e-6 * exact.data[i]) << out << " " << i;
  }
  EXPECT_EQ(runners.exec.output<float>(1)[0], static_cast<float>(kernels::kSqnrCap));  // no error at all
}

// The LLaMA block (rope, grouped-query attention, SwiGLU, untied head) end to end.
TEST(Executor, TinyLlamaLossAndGradientsMatchTheReference) {
  ModelConfig config =
      loadModelConfig((std::filesystem::path(PGQ_SOURCE_DIR) / "tests/parity/tiny_llama.yaml").string());
  ASSERT_LT(config.kvHeads(), config.n_heads);
  TransformerGraph t = buildTransformer(config);
  appendBackward(*t.graph, t.loss, t.params);
  BothRunners runners(*t.graph);
  runners.run();
  EXPECT_LT(runners.relError(0), 1e-6) << "loss";
  for (size_t i = 1; i < t.graph->outputs().size(); ++i) {
    SCOPED_TRACE(t.graph->outputs()[i]->name());
    EXPECT_LT(runners.relError(i), 1e-4);
  }
}

// fuse_softmax and fuse_swiglu (in every compiled model) must not change a number: the
// training graph of a GPT-2-style and a LLaMA-style block with the fused softmax and
// SwiGLU gives the unfused graph's loss and gradients bit for bit on this backend, and
// still matches the reference.
TEST(Executor, TheFusedOpsGiveTheUnfusedLossAndGradientsBitForBit) {
  for (std::string spec : {std::string("tiny"), std::string(PGQ_SOURCE_DIR) + "/tests/parity/tiny_llama.yaml"}) {
    SCOPED_TRACE(spec);
    ModelConfig config = loadModelConfig(spec);
    TransformerGraph plain = buildTransformer(config), fused = buildTransformer(config);
    PassContext ctx;
    ASSERT_TRUE(parsePipeline("fuse_softmax,fuse_swiglu,dce")->run(*fused.graph, ctx));
    appendBackward(*plain.graph, plain.loss, plain.params);
    appendBackward(*fused.graph, fused.loss, fused.params);
    int prologues = 0;
    for (const Node* n : fused.graph->nodes())
      prologues += n->op() == Op::kSoftmaxGrad && n->attrs().has(AttrKey::kCausal) && n->attrs().has(AttrKey::kScale);
    EXPECT_EQ(prologues, config.n_layers);
    int swiglu_grads = 0;
    for (const Node* n : fused.graph->nodes()) swiglu_grads += n->op() == Op::kSwigluGrad;
    EXPECT_EQ(swiglu_grads, config.activation == Activation::kSwiGlu ? 2 * config.n_layers : 0);
    // The same values in the same order: both graphs create their inputs alike.
    BothRunners a(*plain.graph), b(*fused.graph);
    a.run();
    b.run();
    ASSERT_EQ(plain.graph->outputs().size(), fused.graph->outputs().size());
    for (size_t i = 0; i < plain.graph->outputs().size(); ++i) {
      SCOPED_TRACE(plain.graph->outputs()[i]->name());
      const size_t bytes = static_cast<size_t>(a.exec.outputNode(i)->shape().numElements()) * sizeof(float);
      EXPECT_EQ(std::memcmp(a.exec.outputData(i), b.exec.outputData(i), bytes), 0);
      EXPECT_LT(b.relError(i), i == 0 ? 1e-6 : 1e-4);
    }
  }
}

// An int8 attention's P and dS are quantized along their rows and their columns. The CPU
// backend makes those quantizations inside the softmax and softmax_grad kernels, item
// (batch, head) by item, while each is in cache (kernels::quantizeItems): the
// quantizations of P along its columns (read beside dS by softmax_grad) included. The
// training graph of a GPT-2-style and a LLaMA-style block, every GEMM in int8, gives the
// loss and gradients bit for bit of the same graph whose quantizations read identity
// copies of P and dS (which no softmax kernel makes).
TEST(Executor, AnAttentionsQuantizationsMadeInItsSoftmaxKernelsChangeNoBit) {
  const Recipe recipe = parseRecipe(R"(gemms:
  - {match: ".*", decision: int8, lhs_format: "int8:channel:rtn", rhs_format: "int8:channel:rtn:asym"}
)",
                                    "all_int8.yaml");
  for (std::string spec : {std::string("tiny"), std::string(PGQ_SOURCE_DIR) + "/tests/parity/tiny_llama.yaml"}) {
    SCOPED_TRACE(spec);
    ModelConfig config = loadModelConfig(spec);
    std::vector<TransformerGraph> graphs;
    graphs.push_back(buildTransformer(config));
    graphs.push_back(buildTransformer(config));
    for (TransformerGraph& t : graphs) {
      PassContext ctx;
      buildForwardPipeline()->run(*t.graph, ctx);
      appendBackward(*t.graph, t.loss, t.params);
      TrainingPipelineOptions options;
      options.recipe = recipe;
      buildTrainingPipeline(options)->run(*t.graph, ctx);
    }
    Graph& copies = *graphs[1].graph;
    auto isSoftmax = [](const Node* n) { return n->op() == Op::kSoftmax || n->op() == Op::kSoftmaxGrad; };
    std::map<Node*, Node*> copy_of;
    int quantizations = 0;
    for (Node* q : copies.postOrder()) {
      if ((q->op() != Op::kQuantize && q->op() != Op::kQuantParams) || !isSoftmax(q->operand(0))) continue;
      Node*& copy = copy_of[q->operand(0)];
      if (!copy) copy = Builder(copies).transpose(q->operand(0), {0, 1, 2, 3});
      copies.setOperand(q, 0, copy);
      ++quantizations;
    }
    // Per layer: P along its rows and columns, dS along both: scales and bytes each.
    EXPECT_EQ(quantizations, 8 * config.n_layers);
    ExecutorOptions profiled;
    profiled.profile = true;
    for (const NodeProfile& p : Executor(*graphs[0].graph, profiled).profile())
      EXPECT_FALSE((p.node->op() == Op::kQuantize || p.node->op() == Op::kQuantParams) && isSoftmax(p.node->operand(0)))
          << p.node->name() << " has a kernel of its own";
    // The same values in the same order: both graphs create their inputs alike (the
    // reference evaluator has no int8 rules, so BothRunners cannot feed them).
    std::vector<std::unique_ptr<Tensor>> tensors;
    auto run = [&](const Graph& g) {
      auto exec = std::make_unique<Executor>(g);
      uint64_t seed = 7;
      for (Node* node : g.nodes()) {
        if (node->op() != Op::kParameter && node->op() != Op::kInput) continue;
        RefTensor value = node->dtype() == DType::kS32
                              ? randomIndices(node->type(), BothRunners::indexBound(*node), seed++)
                              : randomRefTensor(node->type(), seed++, 0.5);
        tensors.push_back(std::make_unique<Tensor>(toTensor(value)));
        exec->bind(node, *tensors.back());
      }
      exec->run(3);
      return exec;
    };
    std::unique_ptr<Executor> a = run(*graphs[0].graph), b = run(copies);
    ASSERT_EQ(graphs[0].graph->outputs().size(), copies.outputs().size());
    for (size_t i = 0; i < copies.outputs().size(); ++i) {
      SCOPED_TRACE(copies.outputs()[i]->name());
      const size_t bytes = static_cast<size_t>(a->outputNode(i)->shape().numElements()) * sizeof(float);
      EXPECT_EQ(std::memcmp(a->outputData(i), b->outputData(i), bytes), 0);
    }
  }
}

TEST(Executor, UnboundInputsAndWrongTypesAreErrors) {
  auto g = parseGraph(readGolden("mlp.pgq"));
  Executor exec(*g);
  EXPECT_THROW(exec.run(), Error);
  Tensor wrong({DType::kF32, Shape{3}});
  EXPECT_THROW(exec.bind("x", wrong), Error);
  EXPECT_THROW(exec.bind("nope", wrong), Error);
}

// The trainer refuses a plan larger than the machine's memory from this callback, so it
// must see the final sizes, and a refusal must leave nothing allocated behind.
TEST(Executor, ShowsItsMemoryPlanBeforeAllocatingAndCanBeRefused) {
  auto g = parseGraph(readGolden("mlp.pgq"));
  MemoryStats seen;
  ExecutorOptions options;
  options.before_allocation = [&](const MemoryStats& planned) { seen = planned; };
  Executor exec(*g, options);
  MemoryStats after = exec.memory();
  EXPECT_GT(seen.arena_bytes, 0u);
  EXPECT_EQ(seen.arena_bytes, after.arena_bytes);
  EXPECT_EQ(seen.persistent_bytes, after.persistent_bytes);
  EXPECT_EQ(seen.bound_bytes, after.bound_bytes);
  options.before_allocation = [](const MemoryStats&) { throw Error("too large"); };
  EXPECT_THROW(Executor(*g, options), Error);
}

// The CPU backend computes a quant_params node's scales inside its quantize
// (quantizeDynamic) where that quantize is the scales' only one: every result must equal
// the kernels' two calls, computeQuantParams then quantize, and the int8 GEMM of those,
// bit for bit; the scales' other readers (the qmatmul, a graph output) read them after
// the quantize wrote them. %ws (K along the rows) and %gs (two quantizes, RTN and SR)
// keep their own kernel.
TEST(Executor, ScalesComputedInsideTheirQuantizeAreTheKernelsOwn) {
  auto g = parseGraph(R"pgq(graph @fused {
  %x = input() : f32[37,70]
  %w = input() : f32[70,24]
  %xs = quant_params(%x) {format="int8:channel:rtn", side="lhs", contract_dims=[1]} : f32[37]
  %ws = quant_params(%w) {format="int7:channel:rtn", side="rhs", contract_dims=[0]} : f32[24]
  %xq = quantize(%x, %xs) {format="int8:channel:rtn", side="lhs", contract_dims=[1], seed=0} : u8[37,70]
  %wq = quantize(%w, %ws) {format="int7:channel:rtn", side="rhs", contract_dims=[0], seed=0} : s8[70,24]
  %h = qmatmul(%xq, %wq, %xs, %ws) {lhs_contract=[1], rhs_contract=[0], lhs_format="int8:channel:rtn", rhs_format="int7:channel:rtn"} : f32[37,24]
  %gs = quant_params(%x) {format="int7:channel:sr", side="lhs", contract_dims=[1]} : f32[37]
  %gq = quantize(%x, %gs) {format="int7:channel:sr", side="lhs", contract_dims=[1], seed=5} : u8[37,70]
  %gr = quantize(%x, %gs) {format="int7:channel:rtn", side="lhs", contract_dims=[1], seed=0} : u8[37,70]
  return %h, %xs, %xq, %gq, %gr
}
)pgq");
  Tensor x(g->find("x")->type()), w(g->find("w")->type());
  std::vector<float> xv(37 * 70), wv(70 * 24);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37f * float(i)) * (i % 11 == 0 ? 9.0f : 1.0f);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = std::cos(0.11f * float(i)) * 0.05f;
  std::memcpy(x.raw(), xv.data(), x.bytes());
  std::memcpy(w.raw(), wv.data(), w.bytes());
  Executor exec(*g);
  exec.bind("x", x);
  exec.bind("w", w);
  const int64_t step = 3;
  exec.run(step);

  namespace k = kernels;
  const k::OperandView xview{1, 37, 70, true}, wview{1, 70, 24, false};
  const QuantFormat f8 = QuantFormat::parse("int8:channel:rtn"), f7sr = QuantFormat::parse("int7:channel:sr"),
                    f7 = QuantFormat::parse("int7:channel:rtn");
  std::vector<float> xs(37), ws(24), gs(37);
  k::computeQuantParams(xv, xview, f8, xs);
  k::computeQuantParams(wv, wview, f7, ws);
  k::computeQuantParams(xv, xview, f7sr, gs);
  std::vector<uint8_t> xq(xv.size()), gq(xv.size()), gr(xv.size());
  std::vector<int8_t> wq(wv.size());
  k::quantize(xv, xview, f8, xs, std::span<uint8_t>(xq), {0, step});
  k::quantize(wv, wview, f7, ws, std::span<int8_t>(wq), {0, step});
  k::quantize(xv, xview, f7sr, gs, std::span<uint8_t>(gq), {5, step});
  k::quantize(xv, xview, f7, gs, std::span<uint8_t>(gr), {0, step});
  std::vector<float> h(37 * 24);
  k::int8Gemm(k::GemmShape{1, 37, 24, 70}, xq, f8, xs, wq, f7, ws, h);
  auto same = [&](size_t output, const void* want, size_t bytes) {
    return std::memcmp(exec.outputData(output), want, bytes) == 0;
  };
  EXPECT_TRUE(same(0, h.data(), h.size() * sizeof(float)));
  // The int8 GEMM's output summed its squares as it was written (for the gradient norm):
  // sumSquares' value bit for bit. The other outputs have none.
  const std::optional<double> squares = exec.outputSumOfSquares(0);
  ASSERT_TRUE(squares.has_value());
  const double want = k::sumSquares(h.data(), static_cast<int64_t>(h.size()));
  EXPECT_EQ(std::memcmp(&*squares, &want, sizeof(double)), 0) << *squares << " vs " << want;
  EXPECT_FALSE(exec.outputSumOfSquares(1).has_value());
  EXPECT_TRUE(same(1, xs.data(), xs.size() * sizeof(float)));
  EXPECT_TRUE(same(2, xq.data(), xq.size()));
  EXPECT_TRUE(same(3, gq.data(), gq.size()));
  EXPECT_TRUE(same(4, gr.data(), gr.size()));
}

// With ExecutorOptions::parameter_quantizations, a parameter's round-to-nearest
// quantizations (here its forward one, K along the rows, and its input gradient's, K
// along the columns) are the caller's to make: the optimizer's fused update makes them
// and the next run skips them. Over several steps every output equals, bit for bit, an
// executor that quantizes the weight itself after a plain update; the stochastic one
// stays in the graph. Skipping is real: told the weight is quantized when it is not, the
// run reads the stale copies.
TEST(Executor, ParameterQuantizationsMadeByTheUpdateEqualTheGraphs) {
  auto g = parseGraph(R"pgq(graph @weights {
  %x = input() : f32[37,70]
  %d = input() : f32[37,24]
  %w = parameter() : f32[70,24]
  %xs = quant_params(%x) {format="int8:channel:rtn", side="lhs", contract_dims=[1]} : f32[37]
  %xq = quantize(%x, %xs) {format="int8:channel:rtn", side="lhs", contract_dims=[1], seed=0} : u8[37,70]
  %ws = quant_params(%w) {format="int8:channel:rtn", side="rhs", contract_dims=[0]} : f32[24]
  %wq = quantize(%w, %ws) {format="int8:channel:rtn", side="rhs", contract_dims=[0], seed=0} : s8[70,24]
  %h = qmatmul(%xq, %wq, %xs, %ws) {lhs_contract=[1], rhs_contract=[0], lhs_format="int8:channel:rtn", rhs_format="int8:channel:rtn"} : f32[37,24]
  %ds = quant_params(%d) {format="int8:channel:rtn", side="lhs", contract_dims=[1]} : f32[37]
  %dq = quantize(%d, %ds) {format="int8:channel:rtn", side="lhs", contract_dims=[1], seed=0} : u8[37,24]
  %vs = quant_params(%w) {format="int8:channel:rtn", side="rhs", contract_dims=[1]} : f32[70]
  %vq = quantize(%w, %vs) {format="int8:channel:rtn", side="rhs", contract_dims=[1], seed=0} : s8[70,24]
  %dx = qmatmul(%dq, %vq, %ds, %vs) {lhs_contract=[1], rhs_contract=[1], lhs_format="int8:channel:rtn", rhs_format="int8:channel:rtn"} : f32[37,70]
  %ss = quant_params(%w) {format="int8:channel:sr", side="rhs", contract_dims=[0]} : f32[24]
  %sq = quantize(%w, %ss) {format="int8:channel:sr", side="rhs", contract_dims=[0], seed=3} : s8[70,24]
  return %h, %dx, %sq
}
)pgq");
  auto fill = [](Tensor& t, float a) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numElements(); ++i) p[i] = std::sin(a * float(i + 1)) * (i % 13 == 0 ? 3.0f : 1.0f);
  };
  Tensor x(g->find("x")->type()), d(g->find("d")->type());
  fill(x, 0.37f);
  fill(d, 0.23f);
  Tensor w_fused(g->find("w")->type()), w_plain(g->find("w")->type());
  fill(w_fused, 0.11f);
  fill(w_plain, 0.11f);
  const int64_t n = w_fused.numElements();
  std::vector<float> grad(static_cast<size_t>(n)), m1(grad.size()), v1(grad.size()), m2(grad.size()), v2(grad.size());
  ExecutorOptions options;
  options.parameter_quantizations = true;
  Executor fused(*g, options), plain(*g);
  for (Executor* e : {&fused, &plain}) {
    e->bind("x", x);
    e->bind("d", d);
  }
  fused.bind("w", w_fused);
  plain.bind("w", w_plain);
  EXPECT_EQ(fused.parameterQuantizations("w").size(), 2u);  // not the stochastic one
  EXPECT_TRUE(fused.parameterQuantizations("x").empty());
  EXPECT_TRUE(plain.parameterQuantizations("w").empty());
  auto same = [&](size_t output) {
    const size_t bytes = static_cast<size_t>(g->outputs()[output]->shape().numElements()) *
                         dtypeSize(g->outputs()[output]->dtype());
    return std::memcmp(fused.outputData(output), plain.outputData(output), bytes) == 0;
  };
  for (int64_t step = 0; step < 4; ++step) {
    fused.run(step, 0, /*parameters_quantized=*/step > 0);
    plain.run(step);
    for (size_t output = 0; output < 3; ++output) EXPECT_TRUE(same(output)) << "step " << step << " output " << output;
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = std::cos(0.07f * float(i) + float(step));
    const kernels::AdamWParams p{0.05f, 0.9f, 0.95f, 1e-8f, 0.1f, step + 1};
    kernels::adamwUpdate(w_plain.data<float>(), grad.data(), m2.data(), v2.data(), n, p, 1.0f);
    kernels::adamwUpdateQuantized(w_fused.data<float>(), grad.data(), m1.data(), v1.data(), n, p, 1.0f,
                                  fused.parameterQuantizations("w"));
  }
  // The weight changed behind the executor's back: a run told otherwise skips the
  // quantizations and reads the copies of the previous update.
  fill(w_fused, 0.5f);
  fill(w_plain, 0.5f);
  fused.run(4, 0, true);
  plain.run(4);
  EXPECT_FALSE(same(0));
  EXPECT_FALSE(same(1));
  fused.run(5, 0, false);
  plain.run(5);
  for (size_t output = 0; output < 3; ++output) EXPECT_TRUE(same(output)) << "output " << output;
}

// A tied embedding's gradient, add(w.grad, scatter_add(dy, idx)), runs as one kernel
// (kernels::addScatter) with the two kernels' result bit for bit; the scatter_add gets
// neither a kernel nor a buffer. A scatter_add that is also an output keeps both.
TEST(Executor, AnAddOfAScatterAddScattersInPlace) {
  auto g = parseGraph(R"pgq(graph @tied {
  %dy = input() : f32[20,8]
  %idx = input() : s32[20]
  %w = input() : f32[50,8]
  %s = scatter_add(%dy, %idx) : f32[50,8]
  %g = add(%w, %s) : f32[50,8]
  %s2 = scatter_add(%dy, %idx) : f32[50,8]
  %g2 = add(%s2, %w) : f32[50,8]
  return %g, %g2, %s2
}
)pgq");
  Tensor dy(g->find("dy")->type()), idx(g->find("idx")->type()), w(g->find("w")->type());
  for (int64_t i = 0; i < dy.numElements(); ++i) dy.data<float>()[i] = std::sin(0.3f * float(i));
  for (int64_t i = 0; i < w.numElements(); ++i) w.data<float>()[i] = i % 9 == 0 ? -0.0f : std::cos(0.7f * float(i));
  for (int64_t i = 0; i < idx.numElements(); ++i) idx.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 13);
  const std::unique_ptr<Executor> run = runProfiled(*g, {{"dy", &dy}, {"idx", &idx}, {"w", &w}});
  const Executor& exec = *run;
  std::vector<std::string> ran;
  for (const NodeProfile& p : exec.profile()) ran.push_back(p.node->name());
  EXPECT_EQ(ran, (std::vector<std::string>{"g", "s2", "g2"}));
  EXPECT_EQ(exec.memory().arena_bytes, 0u);  // every other value is bound or an output
  std::vector<float> table(400), sum(400);
  kernels::scatterAdd(dy.data<float>(), idx.data<int32_t>(), table.data(), 20, 50, 8);
  kernels::binary(kernels::BinaryOp::kAdd, w.data<float>(), kernels::Bcast::kFull, table.data(), kernels::Bcast::kFull,
                  sum.data(), 1, 400);
  EXPECT_EQ(std::memcmp(exec.outputData(0), sum.data(), 400 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(exec.outputData(1), sum.data(), 400 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(exec.outputData(2), table.data(), 400 * sizeof(float)), 0);
}

// An add of a scatter_add writes over its other operand when nothing else reads that
// value (a weight gradient's GEMM output): no buffer of its own and no pass over the
// untouched rows. A value read again after the add, or returned, keeps its own buffer.
// The executor's profile says which operand was written over (--profile-ops counts that
// add's bytes by it).
TEST(Executor, AnAddOfAScatterAddWritesOverAValueNothingElseReads) {
  const std::string head = R"pgq(graph @tied {
  %dy = input() : f32[20,8]
  %idx = input() : s32[20]
  %w = input() : f32[50,8]
  %v = input() : f32[50,8]
  %a = mul(%w, %v) : f32[50,8]
  %s = scatter_add(%dy, %idx) : f32[50,8]
  %g = add(%a, %s) : f32[50,8]
)pgq";
  struct Case {
    std::string tail;
    size_t arena_bytes, persistent_bytes;
    int in_place_operand;
  };
  const Case cases[] = {
      {"  return %g\n}\n", 0, 1600, 0},                                           // in place: a's buffer is g's
      {"  %c = mul(%a, %v) : f32[50,8]\n  return %g, %c\n}\n", 1600, 3200, -1},  // a read after the add
      {"  return %g, %a\n}\n", 0, 3200, -1},                                       // a returned
  };
  for (const Case& c : cases) {
    auto g = parseGraph(head + c.tail);
    Tensor dy(g->find("dy")->type()), idx(g->find("idx")->type()), w(g->find("w")->type()), v(g->find("v")->type());
    for (int64_t i = 0; i < dy.numElements(); ++i) dy.data<float>()[i] = std::sin(0.3f * float(i));
    for (int64_t i = 0; i < w.numElements(); ++i) w.data<float>()[i] = std::cos(0.7f * float(i));
    for (int64_t i = 0; i < v.numElements(); ++i) v.data<float>()[i] = 1.0f + 0.01f * float(i);
    for (int64_t i = 0; i < idx.numElements(); ++i) idx.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 13);
    const std::unique_ptr<Executor> run = runProfiled(*g, {{"dy", &dy}, {"idx", &idx}, {"w", &w}, {"v", &v}});
    const Executor& exec = *run;
    int reported = -2;
    for (const NodeProfile& p : exec.profile())
      if (p.node->name() == "g") reported = p.in_place_operand;
    EXPECT_EQ(reported, c.in_place_operand) << c.tail;
    EXPECT_EQ(exec.memory().arena_bytes, c.arena_bytes) << c.tail;
    EXPECT_EQ(exec.memory().persistent_bytes, c.persistent_bytes) << c.tail;
    std::vector<float> a(400), table(400), sum(400), again(400);
    for (size_t i = 0; i < 400; ++i) a[i] = w.data<float>()[i] * v.data<float>()[i];
    kernels::scatterAdd(dy.data<float>(), idx.data<int32_t>(), table.data(), 20, 50, 8);
    for (size_t i = 0; i < 400; ++i) sum[i] = a[i] + table[i];
    for (size_t i = 0; i < 400; ++i) again[i] = a[i] * v.data<float>()[i];
    EXPECT_EQ(std::memcmp(exec.outputData(0), sum.data(), 400 * sizeof(float)), 0) << c.tail;
    if (c.tail.find("%c") != std::string::npos) {
      EXPECT_EQ(std::memcmp(exec.outputData(1), again.data(), 400 * sizeof(float)), 0) << c.tail;
    }
    if (c.tail.find("%g, %a") != std::string::npos) {
      EXPECT_EQ(std::memcmp(exec.outputData(1), a.data(), 400 * sizeof(float)), 0) << c.tail;
    }
  }
}

// Elementwise maps write over an operand nothing else reads (CpuBackend's
// planElementwiseInPlace): a chain of them needs one buffer, and gives the results of the
// same chain with every value returned (each in a buffer of its own) bit for bit. A value
// read again later, returned, or an input is not written over.
TEST(Executor, ElementwiseMapsWriteOverOperandsNothingElseReads) {
  const std::string body = R"pgq(graph @maps {
  %x = input() : f32[2,3,8,8]
  %y = input() : f32[2,3,8,8]
  %a = mul(%x, %y) : f32[2,3,8,8]
  %b = exp(%a) : f32[2,3,8,8]
  %c = add(%y, %b) : f32[2,3,8,8]
  %r = rope(%c) {theta=10000.0, rotation="forward"} : f32[2,3,8,8]
  %d = gelu_grad(%x, %r) : f32[2,3,8,8]
  %k = mul(%d, %x) : f32[2,3,8,8]
  %s = softmax(%k) {scale=0.5, causal=-inf} : f32[2,3,8,8]
  %t = exp(%y) : f32[2,3,8,8]
  %g = softmax_grad(%s, %t) {scale=0.5, causal=-inf} : f32[2,3,8,8]
)pgq";
  auto alone = parseGraph(body + "  return %g\n}\n");
  auto all = parseGraph(body + "  return %g, %a, %b, %c, %r, %d, %k, %s, %t\n}\n");
  Tensor x(alone->find("x")->type()), y(alone->find("y")->type());
  for (int64_t i = 0; i < x.numElements(); ++i) {
    x.data<float>()[i] = std::sin(0.37f * float(i));
    y.data<float>()[i] = 0.5f * std::cos(0.11f * float(i));
  }
  const std::unique_ptr<Executor> a = runProfiled(*alone, {{"x", &x}, {"y", &y}});
  const std::unique_ptr<Executor> b = runProfiled(*all, {{"x", &x}, {"y", &y}});
  std::map<std::string, int> over;
  for (const NodeProfile& p : a->profile()) over[p.node->name()] = p.in_place_operand;
  EXPECT_EQ(over["a"], -1);  // both operands are inputs
  EXPECT_EQ(over["b"], 0);
  EXPECT_EQ(over["c"], 1);   // y is an input
  EXPECT_EQ(over["r"], 0);
  EXPECT_EQ(over["d"], 1);   // x is an input
  EXPECT_EQ(over["k"], 0);
  EXPECT_EQ(over["s"], 0);
  EXPECT_EQ(over["t"], -1);  // y is an input
  EXPECT_EQ(over["g"], 0);   // over P, which nothing else reads
  const size_t bytes = 2 * 3 * 8 * 8 * sizeof(float);
  EXPECT_EQ(a->memory().arena_bytes, bytes);  // t's; every other value lives in the output's buffer
  EXPECT_EQ(a->memory().persistent_bytes, bytes);
  for (const NodeProfile& p : b->profile()) EXPECT_EQ(p.in_place_operand, -1) << p.node->name();
  EXPECT_EQ(std::memcmp(a->outputData(0), b->outputData(0), bytes), 0);
}

TEST(MemoryPlan, NeverOverlapsLiveBuffersAndReusesDeadOnes) {
  std::vector<BufferRequest> requests = {
      {1000, 0, 2}, {500, 1, 3}, {1000, 3, 5}, {200, 4, 4}, {4000, 6, 7}, {64, 0, 7}};
  MemoryPlan plan = planMemory(requests);
  for (size_t i = 0; i < requests.size(); ++i)
    for (size_t j = i + 1; j < requests.size(); ++j) {
      bool live_together = !(requests[i].last < requests[j].first || requests[j].last < requests[i].first);
      bool overlap = plan.offsets[i] < plan.offsets[j] + requests[j].bytes &&
                     plan.offsets[j] < plan.offsets[i] + requests[i].bytes;
      EXPECT_FALSE(live_together && overlap) << i << " and " << j;
    }
  size_t total = 0;
  for (const auto& r : requests) total += r.bytes;
  EXPECT_LT(plan.arena_bytes, total);  // something was reused
  for (size_t off : plan.offsets) EXPECT_EQ(off % 64, 0u);
}

}  // namespace
}  // namespace pgq
