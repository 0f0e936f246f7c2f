// The attention softmax on [batch * 256, 256] scores (`medium`: batch 64 = its 8 x 8
// heads, from memory; 12: in cache), the best of 30 runs, 1 and 2 threads: the separate
// kernels (mul by 0.125, causal_mask, softmax), softmax alone, and the fused kernel.
// Built against a build's kernels library by softmax_rows.sh.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
#include <omp.h>
#include "kernels/elementwise.h"
#include "kernels/softmax.h"
using namespace pgq::kernels;
int main(int argc, char** argv) {
  const int64_t batch = atoi(argv[1]), T = 256, rows = batch * T, n = rows * T;
  std::mt19937 gen(1); std::uniform_real_distribution<float> d(-8, 8);
  std::vector<float> x(n), t(n), y(n); for (auto& v : x) v = d(gen);
  const float sc[1] = {0.125f};
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (int mode = 0; mode < 3; ++mode) {
      double best = 1e9;
      for (int rep = 0; rep < 30; ++rep) {
        auto s = std::chrono::steady_clock::now();
        if (mode == 0) {
          binary(BinaryOp::kMul, x.data(), Bcast::kFull, sc, Bcast::kScalar, t.data(), rows, T);
          causalMask(t.data(), t.data(), batch, T, T, -INFINITY);
          softmax(t.data(), y.data(), rows, T);
        } else if (mode == 1) {
          softmax(x.data(), y.data(), rows, T);
        } else {
          softmax(x.data(), y.data(), rows, T, {.scale = 0.125f, .causal = true, .fill = -INFINITY, .tq = T});
        }
        best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count());
      }
      printf("batch %ld threads %d %s: %.0f us\n", batch, threads, mode == 0 ? "separate" : mode == 1 ? "plain softmax" : "fused", best);
    }
  }
}
