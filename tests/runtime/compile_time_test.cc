#include <time.h>

#include <algorithm>

#include <gtest/gtest.h>

#include "runtime/trainer.h"

namespace pgq {
namespace {

// CPU seconds of this thread: another process on the machine lengthens wall time, not
// this.
double threadSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Everything `pgq train` does before its first step, for a `tiny`-width model of
// `layers` layers; the fastest of `repeats` runs.
double compileSeconds(int64_t layers, int repeats) {
  TrainOptions options;
  options.model = loadModelConfig("tiny");
  options.model.n_layers = layers;
  options.steps = 1 << 30;
  options.progress = false;
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    double start = threadSeconds();
    TrainingSession session(options);
    best = std::min(best, threadSeconds() - start);
  }
  return best;
}

// Compile time must grow linearly with depth (issue 15): 8x the layers took 28x the
// time when the memory planner compared every buffer with every other. Linear is 8x;
// larger graphs run somewhat slower per node (caches), ~12x here; quadratic is 64x. The
// bound sits halfway (in log) between: thread CPU time still grows when another test
// shares the core's caches (24.5x seen on a Zen 3 under `ctest -j2`).
TEST(CompileTime, GrowsLinearlyWithLayers) {
  double shallow = compileSeconds(64, 3);
  double deep = compileSeconds(512, 2);
  EXPECT_LT(deep / shallow, 32.0) << "64 layers: " << shallow << " s, 512 layers: " << deep << " s";
}

}  // namespace
}  // namespace pgq
