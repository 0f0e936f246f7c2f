// Compile time against depth (issue 15): everything `pgq train` does before its first
// step (build the forward graph, its pipeline, autodiff, the training pipeline with
// its verifier, the same for the evaluation graph, both executors' lowering and memory
// plans, parameter initialization) for a `tiny`-width model of 64 to 1024 layers.
//
//   build/bench/compile_bench
//
// Counters: ms_per_layer (flat when compile time is linear in the layers) and the
// training graph's nodes.
#include <omp.h>

#include <benchmark/benchmark.h>

#include <chrono>

#include "runtime/trainer.h"

namespace {

void compileDeep(benchmark::State& state) {
  omp_set_num_threads(1);
  pgq::TrainOptions options;
  options.model = pgq::loadModelConfig("tiny");
  options.model.n_layers = state.range(0);
  options.steps = 1 << 30;
  options.progress = false;
  size_t nodes = 0;
  double total_s = 0;
  for (auto _ : state) {
    // The session's destructor is not compile time: it runs outside the timed part.
    auto start = std::chrono::steady_clock::now();
    pgq::TrainingSession session(options);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(seconds);
    total_s += seconds;
    nodes = session.trainingGraph().graph->size();
  }
  state.counters["ms_per_layer"] =
      total_s * 1e3 / static_cast<double>(state.iterations()) / static_cast<double>(state.range(0));
  state.counters["nodes"] = static_cast<double>(nodes);
}

}  // namespace

BENCHMARK(compileDeep)->ArgName("layers")->RangeMultiplier(2)->Range(64, 1024)->MinTime(0.5)->UseManualTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
