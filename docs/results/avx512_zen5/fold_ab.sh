#!/bin/bash
# The fused update folding the new weights' magnitudes as it writes them (AdamW's
# updateFolding) against the build before it, on this AVX-512 CPU, in turn, nothing else
# running:
#   fold_identical.txt  medium's F+B recipe after 3 steps: checkpoints of both builds (cmp)
#   fold_kernel.txt     elementwise_bench AdamWQuantizeCold (a GPT-2 MLP weight read from
#                       memory): the update alone and fused, medians of 3, 3 rounds
#   fold_quant.txt      quant_bench's quantizeDynamic (it walks rows through the function the
#                       fold now feeds, with no bits given), 2 rounds
#   fold_steps_ab.txt   train_step_bench f32 and F+B at GPT-2 124M's exact shape, F+B on
#                       `medium`, medians of 3 repetitions, 2 rounds
#   BASE=/path/to/base/build BASE_REV=a873470 bash docs/results/avx512_zen5/fold_ab.sh   (~8 min)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"
ab_identical_medium >fold_identical.txt
ab_bench 3 elementwise_bench 'AdamWQuantizeCold/2/[02]' --benchmark_min_time=1 --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true >fold_kernel.txt
ab_bench 2 quant_bench '(act2048x1024|weight1024x1024)/dynamic/threads' --benchmark_min_time=0.5 >fold_quant.txt
ab_steps '(f32Step|quantizedStep)/(gpt2_exact|gpt2_exact_FB|medium_FB)/threads:2' >fold_steps_ab.txt
