// Throughput of the f32 non-GEMM kernels at the sizes of the `small` model (tokens
// 2048, d 256, d_ff 1024, 4 heads, seq 128, batch 16; attention scores [64*128, 128],
// byte vocab 256), at 1 and 2 threads (the benchmark argument).
//
// Bytes processed count each buffer read or written once per call, so the figure is
// comparable with memory bandwidth (~24 GB/s single thread on the development machine, docs/PERFORMANCE.md); note that
// most of these buffers (<= 8 MiB) fit in the 32 MiB L3. Times are wall-clock
// (UseRealTime) because the work runs on OpenMP threads.
//
//   build-ew/bench/elementwise_bench --benchmark_min_time=0.2
#include <omp.h>

#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench/bench_main.h"
#include "kernels/elementwise.h"
#include "kernels/layout.h"
#include "kernels/norm.h"
#include "kernels/optim.h"
#include "kernels/quantize.h"
#include "kernels/quantize_items.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

namespace pgq::kernels {
namespace {

constexpr int64_t kTokens = 2048;
constexpr int64_t kModel = 256;
constexpr int64_t kFf = 1024;
constexpr int64_t kVocab = 256;
constexpr int64_t kBatch = 16, kSeq = 128, kHeads = 4, kHeadDim = 64;
constexpr int64_t kScoreRows = kBatch * kHeads * kSeq;  // [B*H*T, T] attention scores
constexpr int64_t kParams = 1600000;

std::vector<float> randomData(int64_t n, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// Sets the thread count from the benchmark argument and reports bytes per iteration.
void setUp(benchmark::State& state) { omp_set_num_threads(static_cast<int>(state.range(0))); }
void finish(benchmark::State& state, int64_t bytes_per_call) {
  state.SetBytesProcessed(state.iterations() * bytes_per_call);
}

constexpr int64_t kF = sizeof(float);

// An activation of the MLP ([tokens, d_ff]) and its gradient.
void activation(benchmark::State& state, UnaryOp op) {
  setUp(state);
  const int64_t n = kTokens * kFf;
  const std::vector<float> x = randomData(n);
  std::vector<float> y(x.size());
  for (auto _ : state) unary(op, x.data(), y.data(), n);
  finish(state, 2 * n * kF);
}

void activationGrad(benchmark::State& state, void (*grad)(const float*, const float*, float*, int64_t)) {
  setUp(state);
  const int64_t n = kTokens * kFf;
  const std::vector<float> x = randomData(n), dy = randomData(n);
  std::vector<float> dx(x.size());
  for (auto _ : state) grad(x.data(), dy.data(), dx.data(), n);
  finish(state, 3 * n * kF);
}

void BM_Gelu(benchmark::State& state) { activation(state, UnaryOp::kGelu); }
void BM_GeluGrad(benchmark::State& state) { activationGrad(state, geluGrad); }
// SwiGLU's gate (LLaMA-style models) and its gradient, same size.
void BM_Silu(benchmark::State& state) { activation(state, UnaryOp::kSilu); }
void BM_SiluGrad(benchmark::State& state) { activationGrad(state, siluGrad); }

// SwiGLU silu(gate) * up forward and both gradients, [tokens, d_ff]: as the separate
// kernels run them (arg 0: silu and mul; mul(dy, up), silu_grad and mul(dy, silu)) and
// as fuse_swiglu's (arg 1: swiglu; swiglu_grad for gate and for up). Bytes: what the
// fused kernels move (forward 3 arrays, backward 7).
void BM_Swiglu(benchmark::State& state) {
  setUp(state);
  const int64_t n = kTokens * kFf;
  const std::vector<float> g = randomData(n), u = randomData(n);
  std::vector<float> s(g.size()), y(g.size());
  const bool fused = state.range(1) != 0;
  for (auto _ : state) {
    if (fused) {
      swiglu(g.data(), u.data(), y.data(), n);
    } else {
      unary(UnaryOp::kSilu, g.data(), s.data(), n);
      binary(BinaryOp::kMul, s.data(), Bcast::kFull, u.data(), Bcast::kFull, y.data(), 1, n);
    }
  }
  finish(state, 3 * n * kF);
}

void BM_SwigluGrad(benchmark::State& state) {
  setUp(state);
  const int64_t n = kTokens * kFf;
  const std::vector<float> g = randomData(n), u = randomData(n), dy = randomData(n), s = randomData(n);
  std::vector<float> t(g.size()), dg(g.size()), du(g.size());
  const bool fused = state.range(1) != 0;
  for (auto _ : state) {
    if (fused) {
      swigluGrad(SwigluOperand::kGate, g.data(), u.data(), dy.data(), dg.data(), n);
      swigluGrad(SwigluOperand::kUp, g.data(), nullptr, dy.data(), du.data(), n);
    } else {
      binary(BinaryOp::kMul, dy.data(), Bcast::kFull, u.data(), Bcast::kFull, t.data(), 1, n);
      siluGrad(g.data(), t.data(), dg.data(), n);
      binary(BinaryOp::kMul, dy.data(), Bcast::kFull, s.data(), Bcast::kFull, du.data(), 1, n);
    }
  }
  finish(state, 7 * n * kF);
}

void BM_RmsNorm(benchmark::State& state) {
  setUp(state);
  const int64_t n = kTokens * kModel;
  const std::vector<float> x = randomData(n);
  std::vector<float> y(x.size());
  for (auto _ : state) rmsNorm(x.data(), y.data(), kTokens, kModel, 1e-5f);
  finish(state, 2 * n * kF);
}

void BM_RmsNormGrad(benchmark::State& state) {
  setUp(state);
  const int64_t n = kTokens * kModel;
  const std::vector<float> x = randomData(n), dy = randomData(n);
  std::vector<float> dx(x.size());
  for (auto _ : state) rmsNormGrad(x.data(), dy.data(), dx.data(), kTokens, kModel, 1e-5f);
  finish(state, 3 * n * kF);
}

void BM_Softmax(benchmark::State& state) {
  setUp(state);
  const int64_t n = kScoreRows * kSeq;
  const std::vector<float> x = randomData(n, -8.0f, 8.0f);
  std::vector<float> y(x.size());
  for (auto _ : state) softmax(x.data(), y.data(), kScoreRows, kSeq);
  finish(state, 2 * n * kF);
}

void BM_SoftmaxGrad(benchmark::State& state) {
  setUp(state);
  const int64_t n = kScoreRows * kSeq;
  const std::vector<float> y = randomData(n, 0.0f, 0.02f), dy = randomData(n);
  std::vector<float> dx(y.size());
  for (auto _ : state) softmaxGrad(y.data(), dy.data(), dx.data(), kScoreRows, kSeq);
  finish(state, 3 * n * kF);
}

void BM_CausalMask(benchmark::State& state) {
  setUp(state);
  const int64_t n = kScoreRows * kSeq;
  const std::vector<float> x = randomData(n);
  std::vector<float> y(x.size());
  for (auto _ : state) causalMask(x.data(), y.data(), kBatch * kHeads, kSeq, kSeq, -1e9f);
  finish(state, 2 * n * kF);
}

// An attention's scaled, causally masked softmax as the separate kernels run it (arg 0:
// mul by the scale, causal_mask, softmax) and as fuse_softmax's one kernel (arg 1).
void BM_AttentionSoftmax(benchmark::State& state) {
  setUp(state);
  const int64_t n = kScoreRows * kSeq;
  const std::vector<float> x = randomData(n, -8.0f, 8.0f), scale{0.125f};
  std::vector<float> t(x.size()), y(x.size());
  const bool fused = state.range(1) != 0;
  const SoftmaxPrologue prologue{.scale = 0.125f, .causal = true, .fill = -INFINITY, .tq = kSeq};
  for (auto _ : state) {
    if (fused) {
      softmax(x.data(), y.data(), kScoreRows, kSeq, prologue);
    } else {
      binary(BinaryOp::kMul, x.data(), Bcast::kFull, scale.data(), Bcast::kScalar, t.data(), kScoreRows, kSeq);
      causalMask(t.data(), t.data(), kBatch * kHeads, kSeq, kSeq, -INFINITY);
      softmax(t.data(), y.data(), kScoreRows, kSeq);
    }
  }
  finish(state, 2 * n * kF);
}

// Its gradient: softmax_grad, causal_mask with 0, mul by the scale (arg 0), or fused (1).
void BM_AttentionSoftmaxGrad(benchmark::State& state) {
  setUp(state);
  const int64_t n = kScoreRows * kSeq;
  const std::vector<float> y = randomData(n, 0.0f, 0.02f), dy = randomData(n), scale{0.125f};
  std::vector<float> g(y.size()), dx(y.size());
  const bool fused = state.range(1) != 0;
  const SoftmaxPrologue prologue{.scale = 0.125f, .causal = true, .fill = -INFINITY, .tq = kSeq};
  for (auto _ : state) {
    if (fused) {
      softmaxGrad(y.data(), dy.data(), dx.data(), kScoreRows, kSeq, prologue);
    } else {
      softmaxGrad(y.data(), dy.data(), g.data(), kScoreRows, kSeq);
      causalMask(g.data(), g.data(), kBatch * kHeads, kSeq, kSeq, 0.0f);
      binary(BinaryOp::kMul, g.data(), Bcast::kFull, scale.data(), Bcast::kScalar, dx.data(), kScoreRows, kSeq);
    }
  }
  finish(state, 3 * n * kF);
}

// An int8 attention's backward at `medium`'s shape (64 batch-heads of [256, 256]) as a
// step runs it, from memory: the fused softmax_grad makes dS, which is quantized along its
// rows (for dS K) and its columns (dS^T Q), and P along its columns (P^T dO). Arg 1: the
// whole value's kernels one after the other (0) or item by item in cache
// (kernels::quantizeItems, 1). Four such attentions in turn (~270 MB), so each call reads
// its operands cold.
void BM_AttentionGradQuantized(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  omp_set_num_threads(threads);
  constexpr int64_t kItems = 64, kT = 256, n = kItems * kT * kT, kLayers = 4;
  const QuantFormat format = QuantFormat::parse("int8:channel:rtn");
  const OperandView by_row{kItems, kT, kT, true}, by_col{kItems, kT, kT, false};
  const OperandView item_row{1, kT, kT, true}, item_col{1, kT, kT, false};
  struct Layer {
    std::vector<float> p, dp, ds, ds_row, ds_col, p_col;
    std::vector<uint8_t> ds_row_q, ds_col_q, p_col_q;
  };
  std::vector<Layer> layers(kLayers);
  for (Layer& l : layers) {
    l.p = randomData(n, 0.0f, 0.02f);
    l.dp = randomData(n);
    l.ds.resize(n);
    l.ds_row.resize(kItems * kT);
    l.ds_col.resize(kItems * kT);
    l.p_col.resize(kItems * kT);
    l.ds_row_q.resize(n);
    l.ds_col_q.resize(n);
    l.p_col_q.resize(n);
  }
  const SoftmaxPrologue prologue{.scale = 0.125f, .causal = true, .fill = -INFINITY, .tq = kT};
  const bool items = state.range(1) != 0;
  int64_t next = 0;
  for (auto _ : state) {
    Layer& l = layers[static_cast<size_t>(next++ % kLayers)];
    if (!items) {
      softmaxGrad(l.p.data(), l.dp.data(), l.ds.data(), kItems * kT, kT, prologue);
      quantizeDynamic(l.ds, by_row, format, l.ds_row, std::span<uint8_t>(l.ds_row_q));
      computeQuantParams(l.ds, by_col, format, l.ds_col);
      quantize(l.ds, by_col, format, l.ds_col, std::span<uint8_t>(l.ds_col_q));
      computeQuantParams(l.p, by_col, format, l.p_col);
      quantize(l.p, by_col, format, l.p_col, std::span<uint8_t>(l.p_col_q));
      continue;
    }
    auto entry = [&](const std::vector<float>& x, const OperandView& view, std::vector<float>& params, void* out,
                     int scales_of, bool dynamic) {
      ItemQuantization e;
      e.x = x.data();
      e.item = view;
      e.format = format;
      e.params = params.data();
      e.out = out;
      e.u8 = true;
      e.scales_of = scales_of;
      e.dynamic = dynamic;
      return e;
    };
    const ItemQuantization entries[] = {entry(l.ds, item_row, l.ds_row, nullptr, -1, false),
                                        entry(l.ds, item_row, l.ds_row, l.ds_row_q.data(), 0, true),
                                        entry(l.ds, item_col, l.ds_col, nullptr, -1, false),
                                        entry(l.ds, item_col, l.ds_col, l.ds_col_q.data(), 2, false),
                                        entry(l.p, item_col, l.p_col, nullptr, -1, false),
                                        entry(l.p, item_col, l.p_col, l.p_col_q.data(), 4, false)};
    quantizeItems(
        kItems,
        [&](int64_t b) {
          softmaxGrad(l.p.data() + b * kT * kT, l.dp.data() + b * kT * kT, l.ds.data() + b * kT * kT, kT, kT, prologue);
        },
        entries);
  }
  state.SetLabel(items ? "item by item" : "whole values");
}

void BM_CrossEntropy(benchmark::State& state) {
  setUp(state);
  const int64_t n = kTokens * kVocab;
  const std::vector<float> x = randomData(n, -5.0f, 5.0f);
  std::vector<int32_t> t(static_cast<size_t>(kTokens));
  for (int64_t i = 0; i < kTokens; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>(i * 37 % kVocab);
  for (auto _ : state) benchmark::DoNotOptimize(crossEntropy(x.data(), t.data(), kTokens, kVocab));
  finish(state, n * kF);
}

void BM_CrossEntropyGrad(benchmark::State& state) {
  setUp(state);
  const int64_t n = kTokens * kVocab;
  const std::vector<float> x = randomData(n, -5.0f, 5.0f);
  std::vector<int32_t> t(static_cast<size_t>(kTokens));
  for (int64_t i = 0; i < kTokens; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>(i * 37 % kVocab);
  std::vector<float> g(x.size());
  for (auto _ : state) crossEntropyGrad(x.data(), t.data(), 1.0f, g.data(), kTokens, kVocab);
  finish(state, 2 * n * kF);
}

void BM_AddRowBroadcast(benchmark::State& state) {
  setUp(state);
  const int64_t n = kTokens * kModel;
  const std::vector<float> a = randomData(n), bias = randomData(kModel);
  std::vector<float> y(a.size());
  for (auto _ : state)
    binary(BinaryOp::kAdd, a.data(), Bcast::kFull, bias.data(), Bcast::kRow, y.data(), kTokens, kModel);
  finish(state, 2 * n * kF);
}

void BM_ColumnSum(benchmark::State& state) {
  setUp(state);
  const int64_t n = kTokens * kModel;
  const std::vector<float> x = randomData(n);
  std::vector<float> y(kModel);
  for (auto _ : state) reduce(ReduceOp::kSum, x.data(), y.data(), 1, kTokens, kModel);
  finish(state, n * kF);
}

void BM_TransposeHeads(benchmark::State& state) {
  setUp(state);
  const int64_t n = kBatch * kSeq * kHeads * kHeadDim;
  const std::vector<float> x = randomData(n);
  std::vector<float> y(x.size());
  const int64_t dims[] = {kBatch, kSeq, kHeads, kHeadDim};
  const int64_t perm[] = {0, 2, 1, 3};
  for (auto _ : state) transpose(x.data(), y.data(), dims, perm);
  finish(state, 2 * n * kF);
}

// [B*H, T, D] -> [B*H, D, T], e.g. K^T per head.
void BM_TransposeLastTwo(benchmark::State& state) {
  setUp(state);
  const int64_t n = kBatch * kHeads * kSeq * kHeadDim;
  const std::vector<float> x = randomData(n);
  std::vector<float> y(x.size());
  const int64_t dims[] = {kBatch * kHeads, kSeq, kHeadDim};
  const int64_t perm[] = {0, 2, 1};
  for (auto _ : state) transpose(x.data(), y.data(), dims, perm);
  finish(state, 2 * n * kF);
}

void BM_AdamW(benchmark::State& state) {
  setUp(state);
  std::vector<float> p = randomData(kParams), m(kParams, 0.0f), v(kParams, 0.0f);
  const std::vector<float> g = randomData(kParams);
  AdamWParams params{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
  for (auto _ : state) {
    adamwUpdate(p.data(), g.data(), m.data(), v.data(), kParams, params, 1.0f);
    ++params.step;
  }
  finish(state, 7 * kParams * kF);  // read param, grad, m, v; write param, m, v
}


// A GPT-2 MLP weight [768, 3072] updated by AdamW and quantized to int8 per channel both
// ways the training graph reads it (forward: K along the rows; input gradient: K along the
// columns). Arg 1 (the variant): 0 the update alone, 1 the update then the graph's
// kernels (computeQuantParams + quantize, quantizeDynamic), 2 adamwUpdateQuantized.
void BM_AdamWQuantize(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  omp_set_num_threads(threads);
  constexpr int64_t kRows = 768, kCols = 3072, n = kRows * kCols;
  std::vector<float> p = randomData(n), m(n, 0.0f), v(n, 0.0f);
  const std::vector<float> g = randomData(n);
  AdamWParams params{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
  const QuantFormat format = QuantFormat::parse("int8:channel:rtn");
  const OperandView fwd{1, kRows, kCols, false}, dgrad{1, kRows, kCols, true};
  std::vector<float> fwd_scales(kCols), dgrad_scales(kRows);
  std::vector<int8_t> fwd_q(n), dgrad_q(n);
  const ParamQuantization qs[] = {{fwd, format, GemmSide::kRhs, fwd_scales, fwd_q.data()},
                                  {dgrad, format, GemmSide::kRhs, dgrad_scales, dgrad_q.data()}};
  const int64_t variant = state.range(1);
  for (auto _ : state) {
    if (variant == 2) {
      adamwUpdateQuantized(p.data(), g.data(), m.data(), v.data(), n, params, 1.0f, qs);
    } else {
      adamwUpdate(p.data(), g.data(), m.data(), v.data(), n, params, 1.0f);
      if (variant == 1) {
        computeQuantParams(p, fwd, format, fwd_scales);
        quantize(p, fwd, format, fwd_scales, std::span<int8_t>(fwd_q));
        quantizeDynamic(p, dgrad, format, dgrad_scales, std::span<int8_t>(dgrad_q));
      }
    }
    ++params.step;
  }
  state.SetLabel(variant == 0 ? "update" : variant == 1 ? "update, then the graph's quantizations" : "fused");
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(7 * n * kF) * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
}

// BM_AdamWQuantize from memory, as in a training step: eight such weights in turn (each
// with its own grad, moments and int8 copies, ~300 MB in all, far beyond the L3), so every
// iteration reads its arrays cold. Args as BM_AdamWQuantize, and two more variants that
// time the fused kernel's parts alone: 3 the column-scaled copy's pass (quantize with
// given scales, K along the rows: what follows the chunks), 4 the row-scaled copy
// (quantizeDynamic, K along the columns: what each chunk does while in cache).
void BM_AdamWQuantizeCold(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  omp_set_num_threads(threads);
  constexpr int64_t kRows = 768, kCols = 3072, n = kRows * kCols, kWeights = 8;
  struct Weight {
    std::vector<float> p, g, m, v, fwd_scales, dgrad_scales;
    std::vector<int8_t> fwd_q, dgrad_q;
  };
  std::vector<Weight> weights(kWeights);
  for (Weight& w : weights) {
    w.p = randomData(n);
    w.g = randomData(n);
    w.m.assign(n, 0.0f);
    w.v.assign(n, 0.0f);
    w.fwd_scales.assign(kCols, 0.01f);
    w.dgrad_scales.resize(kRows);
    w.fwd_q.resize(n);
    w.dgrad_q.resize(n);
  }
  AdamWParams params{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
  const QuantFormat format = QuantFormat::parse("int8:channel:rtn");
  const OperandView fwd{1, kRows, kCols, false}, dgrad{1, kRows, kCols, true};
  const int64_t variant = state.range(1);
  int64_t next = 0;
  for (auto _ : state) {
    Weight& w = weights[static_cast<size_t>(next++ % kWeights)];
    if (variant == 3) {
      quantize(w.p, fwd, format, w.fwd_scales, std::span<int8_t>(w.fwd_q));
    } else if (variant == 4) {
      quantizeDynamic(w.p, dgrad, format, w.dgrad_scales, std::span<int8_t>(w.dgrad_q));
    } else if (variant == 2) {
      const ParamQuantization qs[] = {{fwd, format, GemmSide::kRhs, w.fwd_scales, w.fwd_q.data()},
                                      {dgrad, format, GemmSide::kRhs, w.dgrad_scales, w.dgrad_q.data()}};
      adamwUpdateQuantized(w.p.data(), w.g.data(), w.m.data(), w.v.data(), n, params, 1.0f, qs);
    } else {
      adamwUpdate(w.p.data(), w.g.data(), w.m.data(), w.v.data(), n, params, 1.0f);
      if (variant == 1) {
        computeQuantParams(w.p, fwd, format, w.fwd_scales);
        quantize(w.p, fwd, format, w.fwd_scales, std::span<int8_t>(w.fwd_q));
        quantizeDynamic(w.p, dgrad, format, w.dgrad_scales, std::span<int8_t>(w.dgrad_q));
      }
    }
    if (next % kWeights == 0) ++params.step;
  }
  static const char* const kLabels[] = {"update", "update, then the graph's quantizations", "fused",
                                        "column-scaled copy alone", "row-scaled copy alone"};
  state.SetLabel(kLabels[variant]);
}

void BM_SumSquares(benchmark::State& state) {
  setUp(state);
  const std::vector<float> g = randomData(kParams);
  for (auto _ : state) benchmark::DoNotOptimize(sumSquares(g.data(), kParams));
  finish(state, kParams * kF);
}

#define PGQ_THREADS(bm) BENCHMARK(bm)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond)
PGQ_THREADS(BM_Gelu);
PGQ_THREADS(BM_GeluGrad);
PGQ_THREADS(BM_Silu);
PGQ_THREADS(BM_SiluGrad);
PGQ_THREADS(BM_RmsNorm);
PGQ_THREADS(BM_RmsNormGrad);
PGQ_THREADS(BM_Softmax);
PGQ_THREADS(BM_SoftmaxGrad);
PGQ_THREADS(BM_CausalMask);
PGQ_THREADS(BM_CrossEntropy);
PGQ_THREADS(BM_CrossEntropyGrad);
PGQ_THREADS(BM_AddRowBroadcast);
PGQ_THREADS(BM_ColumnSum);
PGQ_THREADS(BM_TransposeHeads);
PGQ_THREADS(BM_TransposeLastTwo);
PGQ_THREADS(BM_AdamW);
PGQ_THREADS(BM_SumSquares);
BENCHMARK(BM_Swiglu)->ArgsProduct({{1, 2}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SwigluGrad)->ArgsProduct({{1, 2}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AttentionSoftmax)->ArgsProduct({{1, 2}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AttentionSoftmaxGrad)->ArgsProduct({{1, 2}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AttentionGradQuantized)->ArgsProduct({{1, 2}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AdamWQuantize)->ArgsProduct({{1, 2}, {0, 1, 2}})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AdamWQuantizeCold)->ArgsProduct({{1, 2}, {0, 1, 2, 3, 4}})->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pgq::kernels

PGQ_BENCHMARK_MAIN();
