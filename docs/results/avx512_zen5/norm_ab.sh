#!/bin/bash
# The gradient norm's sums of squares taken by the executor as each gradient is made
# (ExecutorOptions::sum_squares_outputs, commit fe982d7, reverted in ba8025a: no gain),
# a build of fe982d7 against the build before it, on this AVX-512 CPU, in turn, nothing
# else running (run from a checkout of fe982d7, whose build/ is the new build):
#   norm_identical.txt  `small` f32 and `medium`'s F+B recipe after 3 steps: checkpoints of
#                       both builds (cmp)
#   norm_steps_ab.txt   train_step_bench f32 and F+B steps of `medium` and of GPT-2 124M's
#                       exact shape, medians of 3 repetitions, 2 rounds
#   BASE=/path/to/base/build BASE_REV=3af0959 bash docs/results/avx512_zen5/norm_ab.sh   (~15 min)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"
{
  ab_identical "small, f32, 3 steps" --model small --steps 3
  ab_identical_medium | tail -n 1
} >norm_identical.txt
ab_steps '(f32Step|quantizedStep)/(medium|medium_FB|gpt2_exact|gpt2_exact_FB)/threads:2' >norm_steps_ab.txt
