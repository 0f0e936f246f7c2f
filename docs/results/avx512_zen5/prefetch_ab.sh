#!/bin/bash
# Column-scaled copies prefetched 4 KiB ahead (roundStoreAvx512 with per-element scales)
# against the build before it, on this AVX-512 CPU, in turn, nothing else running:
#   prefetch_identical.txt  medium's F+B recipe after 3 steps: checkpoints of both builds
#   prefetch_quant.txt      quant_bench: per-column scales from memory (a weight gradient's
#                           operand [2048, 8192]) and in cache (a weight [1024, 1024]), and
#                           a per-row activation the change does not touch, 2 rounds
#   prefetch_kernel.txt     elementwise_bench AdamWQuantizeCold: fused, and its column-scaled
#                           copy alone, medians of 3, 3 rounds
#   prefetch_steps_ab.txt   train_step_bench f32 and F+B at GPT-2 124M's exact shape, f32
#                           and F+B on `medium`, medians of 3 repetitions, 2 rounds
#   BASE=/path/to/base/build BASE_REV=2cd666f bash docs/results/avx512_zen5/prefetch_ab.sh   (~9 min)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"
ab_identical_medium >prefetch_identical.txt
ab_bench 2 quant_bench '(weight1024x1024|wgrad2048x8192)/(rtn|dynamic)/threads|act2048x1024/rtn/threads' \
  --benchmark_min_time=0.5 >prefetch_quant.txt
ab_bench 3 elementwise_bench 'AdamWQuantizeCold/2/[23]' --benchmark_min_time=1 --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true >prefetch_kernel.txt
ab_steps '(f32Step|quantizedStep)/(gpt2_exact|gpt2_exact_FB|medium|medium_FB)/threads:2' >prefetch_steps_ab.txt
