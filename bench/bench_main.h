#pragma once
// main() of the Google Benchmark programs: BENCHMARK_MAIN, after OpenMP is set up the way
// pgq runs it (kernels/threads.h), so the figures are pgq's.
#include <benchmark/benchmark.h>

#include "kernels/threads.h"

#define PGQ_BENCHMARK_MAIN()                                            \
  int main(int argc, char** argv) {                                     \
    pgq::kernels::useSpinWaitPolicy(argv);                              \
    benchmark::Initialize(&argc, argv);                                 \
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;   \
    benchmark::RunSpecifiedBenchmarks();                                \
    benchmark::Shutdown();                                              \
    return 0;                                                           \
  }
