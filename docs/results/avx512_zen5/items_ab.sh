#!/bin/bash
# An int8 attention's quantizations of P and dS made inside the softmax and softmax_grad
# kernels, item (batch, head) by item while each is in cache (kernels::quantizeItems,
# CpuBackend::planItemQuantizations), against the build before it, on this AVX-512 CPU, in
# turn, nothing else running:
#   items_identical.txt  `medium`'s checkpoint after 3 steps of FB_medium.yaml (every GEMM
#                        int8, the attention's too), both builds (cmp)
#   items_kernel.txt     elementwise_bench BM_AttentionGradQuantized (new build only: the
#                        whole values' kernels, arg 0, against item by item, arg 1), 3 rounds
#   items_per_op.txt     `pgq train --profile-ops` of `medium` with FB_medium.yaml, 4 steps,
#                        both builds: kernel time, the softmax kernels and the quantizations
#   items_steps_ab.txt   train_step_bench f32 and F+B steps of `medium`, medians of 3
#                        repetitions, 2 rounds
#   BASE=/path/to/base/build BASE_REV=<rev> bash docs/results/avx512_zen5/items_ab.sh   (~15 min)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"
ab_identical_medium >items_identical.txt
{
  echo "# elementwise_bench --benchmark_filter=AttentionGradQuantized --benchmark_min_time=1, 3 rounds ($(git -C "$root" rev-parse --short HEAD))"
  for round in 1 2 3; do
    echo "## round $round"
    "$new/bench/elementwise_bench" --benchmark_filter=AttentionGradQuantized --benchmark_min_time=1 2>&1 |
      sed 's/\x1b\[[0-9;]*m//g' | grep -E '^BM_'
  done
} >items_kernel.txt
ab_medium_per_op 'ms/step \(|kernel time|^  (quantize|quant_params|softmax|softmax_grad) ' >items_per_op.txt
ab_steps '(f32Step|quantizedStep)/(medium|medium_FB)/threads:2' >items_steps_ab.txt
