// One full training step (sample, forward, backward, gradient clipping, AdamW) of a
// model config on the default corpus: f32 at 1 and 2 threads, bf16, the instrumented
// (profiling) step, and int8 steps with the recipes of the standard policies F, F+B
// and F+B_SR (stage iii).
//
//   build/bench/train_step_bench --benchmark_min_time=10 [--benchmark_filter=small]
//
// Counters: GFLOP/s of the GEMMs (the whole step's useful work), the share of kernel
// time spent in GEMMs, and the executor's peak memory (arena + outputs + parameters;
// AdamW moments add 2x the parameter bytes on top).
#include <omp.h>

#include <benchmark/benchmark.h>

#include <cstdio>

#include "bench/bench_main.h"
#include "ir/dot_dims.h"
#include <fmt/format.h>

#include <map>

#include "app/hwprobe.h"
#include "ir/analysis.h"
#include "plan/hardware.h"
#include "plan/policy.h"
#include "plan/profile.h"
#include "plan/recipe_generator.h"
#include "runtime/trainer.h"

namespace {

void trainStep(benchmark::State& state, const std::string& model, pgq::Precision precision,
               bool profile = false, const std::string& recipe_path = "") {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  pgq::TrainOptions options;
  options.model = pgq::loadModelConfig(model);
  options.steps = 1 << 30;
  options.progress = false;
  options.precision = precision;
  options.profile_ops = true;
  options.recipe_path = recipe_path;
  pgq::TrainingSession session(options);
  double gemm_flops = 0;
  auto live = pgq::liveNodes(*session.trainingGraph().graph);
  for (const pgq::Node* n : session.trainingGraph().graph->nodes())
    if ((n->op() == pgq::Op::kMatMul || n->op() == pgq::Op::kQMatMul) && live.count(n))
      gemm_flops += pgq::gemmSizes(n->operand(0)->shape(), n->operand(1)->shape(),
                                   pgq::DotDims::fromAttrs(n->attrs())).flops();
  int64_t step = 0;
  for (int i = 0; i < 2; ++i) session.step(step++, profile);  // primitive creation, first touch
  pgq::Executor& exec = profile ? session.instrumentedExecutor() : session.executor();
  exec.resetProfile();
  for (auto _ : state) session.step(step++, profile);
  double total = 0, gemm = 0;
  for (const pgq::NodeProfile& p : exec.profile()) {
    total += p.total_ms;
    if (p.node->op() == pgq::Op::kMatMul || p.node->op() == pgq::Op::kQMatMul) gemm += p.total_ms;
  }
  state.counters["GFLOP/s"] = benchmark::Counter(gemm_flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gemm_share"] = gemm / total;
  state.counters["peak_MiB"] = static_cast<double>(exec.memory().peak()) / (1 << 20);
}

void f32Step(benchmark::State& state, std::string model) { trainStep(state, model, pgq::Precision::kF32); }
void bf16Step(benchmark::State& state, std::string model) { trainStep(state, model, pgq::Precision::kBf16); }
// Stage (i): the same step on the instrumented graph (statistics of every GEMM input).
void profiledStep(benchmark::State& state, std::string model) {
  trainStep(state, model, pgq::Precision::kF32, true);
}

// Stage (iii): a step with the recipe a standard policy makes from a profile of this
// model (3 logged steps, with bf16's statistics) on the shipped model of these machines,
// or (hardware "probed") on this machine as pgq hwprobe measures it once.
std::string recipeFor(const std::string& model, const std::string& policy,
                      const std::string& hardware = "epyc-zen3-2c") {
  static std::map<std::string, pgq::Profile> profiles;
  if (!profiles.count(model)) {
    pgq::TrainOptions options;
    options.model = pgq::loadModelConfig(model);
    options.steps = 1 << 30;
    options.progress = false;
    options.profile.candidates = {pgq::ProfileCandidate(pgq::Scheme::kBf16)};
    pgq::TrainingSession session(options);
    for (int i = 0; i < 3; ++i) session.step(i, true);
    profiles.emplace(model, session.profile());
  }
  // "probed-no-bf16": the same model without bf16 GEMMs, so a pair differs in bf16 only.
  // The probe (seconds) runs once, and only for the benchmarks that ask for it.
  auto probed = [] {
    static const pgq::HardwareModel hw = pgq::probeHardware();
    return hw;
  };
  pgq::HardwareModel hw = hardware.starts_with("probed") ? probed() : pgq::loadHardwareModel(hardware);
  if (hardware == "probed-no-bf16") std::erase(hw.formats, pgq::FormatFamily::kBf16);
  pgq::Recipe recipe = pgq::generateRecipe(profiles.at(model), hw, pgq::loadPolicy(policy), "benchmark");
  std::string path = fmt::format("/tmp/pgq_bench_recipe_{}.yaml", std::hash<std::string>{}(model + "|" + policy));
  pgq::writeRecipe(path, recipe);
  return path;
}

void quantizedStep(benchmark::State& state, std::string model, std::string policy) {
  std::string recipe = recipeFor(model, policy);
  trainStep(state, model, pgq::Precision::kF32, false, recipe);
  std::remove(recipe.c_str());
}

// A policy listing int8 and bf16 (recipes/policies/int8-bf16.yaml: pgq-default's
// thresholds; int8-fwd-bf16-bwd.yaml: a backward threshold only bf16 passes) on this
// machine's probed model: int8 where the profile allows, bf16 where the CPU runs it and
// int8 does not pass or pay off, f32 elsewhere; the same policy on the same model without
// bf16 (int8 or f32) for the pair's ratio.
const std::string kInt8Bf16 = std::string(PGQ_BENCH_DIR) + "/../recipes/policies/int8-bf16.yaml";
const std::string kFwdBf16 = std::string(PGQ_BENCH_DIR) + "/../recipes/policies/int8-fwd-bf16-bwd.yaml";
void mixedStep(benchmark::State& state, std::string model, std::string hardware, std::string policy) {
  std::string recipe = recipeFor(model, policy, hardware);
  trainStep(state, model, pgq::Precision::kF32, false, recipe);
  std::remove(recipe.c_str());
}

// Writing the profile (YAML + CSV, atomically) after a few logged steps.
void writeProfile(benchmark::State& state) {
  pgq::TrainOptions options;
  options.model = pgq::loadModelConfig("small");
  options.steps = 1 << 30;
  options.progress = false;
  pgq::TrainingSession session(options);
  for (int i = 0; i < 3; ++i) session.step(i, true);
  std::string path = "/tmp/pgq_bench_profile.yaml";
  for (auto _ : state) pgq::writeProfile(path, session.profile());
  std::remove(path.c_str());
  std::remove("/tmp/pgq_bench_profile.csv");
}

}  // namespace

BENCHMARK_CAPTURE(f32Step, small, std::string("small"))->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(bf16Step, small, std::string("small"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(profiledStep, small, std::string("small"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(quantizedStep, small_F, std::string("small"), std::string("F"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(quantizedStep, small_FB, std::string("small"), std::string("F+B"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(quantizedStep, small_FB_SR, std::string("small"), std::string("F+B_SR"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
// The realistic presets (issue 13): the logits GEMM is a large share of the FLOPs.
BENCHMARK_CAPTURE(f32Step, medium, std::string("medium"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(quantizedStep, medium_FB, std::string("medium"), std::string("F+B"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(profiledStep, medium, std::string("medium"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(quantizedStep, medium_FB_SR, std::string("medium"), std::string("F+B_SR"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(bf16Step, medium, std::string("medium"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(mixedStep, medium_int8_f32, std::string("medium"), std::string("probed-no-bf16"), kInt8Bf16)->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(mixedStep, medium_int8_bf16, std::string("medium"), std::string("probed"), kInt8Bf16)->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
// Forward int8, backward f32 (the paper's F: no bf16) or bf16.
BENCHMARK_CAPTURE(mixedStep, medium_F_f32, std::string("medium"), std::string("probed-no-bf16"), kFwdBf16)->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(mixedStep, medium_F_bf16, std::string("medium"), std::string("probed"), kFwdBf16)->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(f32Step, gpt2_124m, std::string("gpt2-124m"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(quantizedStep, gpt2_124m_FB, std::string("gpt2-124m"), std::string("F+B"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
// Issue 15's shapes: GPT-2's width at 4 layers, and GPT-2 124M exactly at fine-tuning size.
const std::string kGpt2Width = std::string(PGQ_BENCH_DIR) + "/gpt2_width.yaml";
const std::string kGpt2Exact = std::string(PGQ_BENCH_DIR) + "/gpt2_124m_exact.yaml";
BENCHMARK_CAPTURE(f32Step, gpt2_width, kGpt2Width)->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(quantizedStep, gpt2_width_FB, kGpt2Width, std::string("F+B"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(profiledStep, gpt2_width, kGpt2Width)->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(f32Step, gpt2_exact, kGpt2Exact)->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(quantizedStep, gpt2_exact_FB, kGpt2Exact, std::string("F+B"))->ArgName("threads")->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(writeProfile)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(f32Step, tiny, std::string("tiny"))->ArgName("threads")->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

PGQ_BENCHMARK_MAIN();
