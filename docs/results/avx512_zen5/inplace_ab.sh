#!/bin/bash
# A tied embedding's gradient scattered into the weight gradient's GEMM output in place
# (Backend::inPlaceOperand: the add writes over that value, which nothing else reads)
# against the build before it, on this AVX-512 CPU, in turn, nothing else running:
#   inplace_identical.txt  `small` (tied embeddings) after 3 steps, f32, and `medium`'s F+B
#                          recipe after 3 steps: checkpoints of both builds (cmp)
#   inplace_per_op.txt     pgq train --profile-ops, GPT-2 124M's exact shape, f32, both
#                          builds: the kernel time and the add
#   inplace_steps_ab.txt   train_step_bench f32 and F+B at GPT-2's exact shape, with peak
#                          memory, medians of 3 repetitions, 2 rounds
#   BASE=/path/to/base/build BASE_REV=81e2950 bash docs/results/avx512_zen5/inplace_ab.sh   (~6 min)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"
{
  ab_identical "small, f32, 3 steps" --model small --steps 3
  ab_identical_medium | tail -n 1
} >inplace_identical.txt
ab_gpt2_per_op 'kernel time|^  (add|scatter_add) |embed/wte.grad' >inplace_per_op.txt
ab_steps '(f32Step|quantizedStep)/(gpt2_exact|gpt2_exact_FB)/threads:2' >inplace_steps_ab.txt
