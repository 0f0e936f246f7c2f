// One full training step (sample, forward, backward, gradient clipping, AdamW) of a
// model config on the default corpus, at 1 and 2 threads.
//
//   build/bench/train_step_bench --benchmark_min_time=10 [--benchmark_filter=small]
//
// Counters: GFLOP/s of the GEMMs (the whole step's useful work), the share of kernel
// time spent in GEMMs, and the executor's peak memory (arena + outputs + parameters;
// AdamW moments add 2x the parameter bytes on top).
#include <omp.h>

#include <benchmark/benchmark.h>

#include "ir/dot_dims.h"
#include "runtime/trainer.h"

namespace {

void trainStep(benchmark::State& state, const std::string& model, pgq::Precision precision) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  pgq::TrainOptions options;
  options.model = pgq::loadModelConfig(model);
  options.steps = 1 << 30;
  options.progress = false;
  options.precision = precision;
  options.profile_ops = true;
  pgq::TrainingSession session(options);
  double gemm_flops = 0;
  for (const pgq::Node* n : session.trainingGraph().graph->nodes())
    if (n->op() == pgq::Op::kMatMul && !n->users().empty())
      gemm_flops += pgq::gemmSizes(n->operand(0)->shape(), n->operand(1)->shape(),
                                   pgq::DotDims::fromAttrs(n->attrs())).flops();
  int64_t step = 0;
  for (int i = 0; i < 2; ++i) session.step(step++);  // primitive creation, first touch
  session.executor().resetProfile();
  for (auto _ : state) session.step(step++);
  double total = 0, gemm = 0;
  for (const pgq::NodeProfile& p : session.executor().profile()) {
    total += p.total_ms;
    if (p.node->op() == pgq::Op::kMatMul) gemm += p.total_ms;
  }
  state.counters["GFLOP/s"] = benchmark::Counter(gemm_flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gemm_share"] = gemm / total;
  state.counters["peak_MiB"] = static_cast<double>(session.executor().memory().peak()) / (1 << 20);
}

void f32Step(benchmark::State& state, std::string model) { trainStep(state, model, pgq::Precision::kF32); }
void bf16Step(benchmark::State& state, std::string model) { trainStep(state, model, pgq::Precision::kBf16); }

}  // namespace

BENCHMARK_CAPTURE(f32Step, small, std::string("small"))->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(bf16Step, small, std::string("small"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(f32Step, tiny, std::string("tiny"))->ArgName("threads")->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
