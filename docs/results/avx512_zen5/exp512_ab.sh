#!/bin/bash
# Softmax, cross-entropy, gelu, silu and their gradients with exponentials on 16 lanes
# (kernels/vec_math512.h, where the CPU has AVX-512) against the build before them, on
# this AVX-512 CPU, in turn, nothing else running:
#   exp512_identical.txt  `small` (gelu, tied embeddings) after 3 steps, f32, and
#                         `medium`'s F+B recipe (silu) after 3 steps: checkpoints of both
#                         builds (cmp)
#   exp512_kernel.txt     elementwise_bench of those kernels, both builds, 2 rounds (the
#                         base build has no Silu benchmarks)
#   exp512_per_op.txt     pgq train --profile-ops, `medium` F+B and GPT-2 124M's exact
#                         shape F+B, both builds: kernel time and those ops
#   exp512_steps_ab.txt   train_step_bench f32 and F+B steps of `medium` and GPT-2's exact
#                         shape, medians of 3 repetitions, 2 rounds
#   BASE=/path/to/base/build BASE_REV=424abb6 bash docs/results/avx512_zen5/exp512_ab.sh   (~15 min)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"
{
  ab_identical "small, f32, 3 steps" --model small --steps 3
  ab_identical_medium | tail -n 1
} >exp512_identical.txt
ab_bench 2 elementwise_bench 'BM_(Gelu|GeluGrad|Silu|SiluGrad|Softmax|CrossEntropy|CrossEntropyGrad)/' \
  --benchmark_min_time=0.3 >exp512_kernel.txt
ops='kernel time|^  (gelu|gelu_grad|silu|silu_grad|softmax|cross_entropy|cross_entropy_grad) '
ab_fb_per_op "$ops" >exp512_per_op.txt
ab_steps '(f32Step|quantizedStep)/(medium|medium_FB|gpt2_exact|gpt2_exact_FB)/threads:2' >exp512_steps_ab.txt
