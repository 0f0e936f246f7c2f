#!/bin/bash
# The 512-bit round-to-nearest store (kernels/quantize.cc) against the build before it,
# on this AVX-512 CPU, in turn, nothing else running:
#   identical.txt   medium's F+B checkpoint after 3 steps from both builds (cmp)
#   quant_ab.txt    quant_bench rtn and dynamic (scales + quantize), 1 thread, 3 rounds
#   steps_ab.txt    train_step_bench: medium and GPT-2 124M's exact shape, f32 and F+B,
#                   medians of 3 repetitions, 2 rounds; and the perf smoke without steps
#   BASE=/path/to/base/build BASE_REV=3f78a9b bash docs/results/avx512_zen5/ab.sh   (~10 min)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"
ab_identical_medium >identical.txt
{
  filter='(act2048x1024|weight1024x1024|wgrad2048x8192)/(rtn|dynamic)/threads:1'
  echo "# quant_bench --benchmark_filter='$filter' --benchmark_min_time=0.5, base and new in turn, 3 rounds (GB/s per thread)"
  for round in 1 2 3; do
    for b in base new; do
      dir=${!b}
      echo "## round $round $b"
      "$dir/bench/quant_bench" --benchmark_filter="$filter" --benchmark_min_time=0.5 2>&1 | grep -E '^(act|weight|wgrad)'
    done
  done
} >quant_ab.txt
{
  ab_steps '(f32Step|quantizedStep)/(small|small_FB|medium|medium_FB|gpt2_exact|gpt2_exact_FB)/threads:2'
  for b in base new; do
    dir=${!b}
    echo "## perf_smoke --no-step, $b"
    "$dir/bench/perf_smoke" --no-step 2>&1
  done
} >steps_ab.txt
