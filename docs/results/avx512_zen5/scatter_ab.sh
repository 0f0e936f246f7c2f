#!/bin/bash
# A tied embedding's gradient scattered into the add (kernels::addScatter) against a
# build without it, on this AVX-512 CPU, in turn, nothing else running:
#   scatter_identical.txt  `small` (tied embeddings) after 3 steps, f32: checkpoints (cmp)
#   scatter_per_op.txt     pgq train --profile-ops, GPT-2 124M's exact shape, f32, both
#                          builds: the kernel time, add and scatter_add
#   scatter_steps_ab.txt   train_step_bench f32 and F+B at GPT-2's exact shape, 2 rounds
#   BASE=/path/to/base/build BASE_REV=e4bd30f bash docs/results/avx512_zen5/scatter_ab.sh   (~6 min)
# (With BASE_REV=e4bd30f the F+B step also has the optimizer's int8 weight copies, which
# update_ab.sh measures; the f32 step and its per-op split differ by the scatter alone.)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"
ab_identical "small, f32, 3 steps" --model small --steps 3 >scatter_identical.txt
ab_gpt2_per_op 'kernel time|^  (add|scatter_add) |embed/wte.grad|scatter_add  ' >scatter_per_op.txt
{
  ab_steps '(f32Step|quantizedStep)/(gpt2_exact|gpt2_exact_FB)/threads:2'
} >scatter_steps_ab.txt
