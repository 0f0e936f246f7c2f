#!/bin/bash
# fuse_softmax (an attention's scale and causal mask inside its softmax) and fuse_swiglu
# (LLaMA's silu(gate) * up as one op), forward and backward, against the build before
# them, on this AVX-512 CPU, in turn, nothing else running:
#   fuse_identical.txt  `small` f32 (gelu, tied embeddings) and `medium`'s F+B recipe
#                       (SwiGLU, int8 attention) after 3 steps: checkpoints of both builds (cmp)
#   fuse_kernel.txt     elementwise_bench of the new build: the separate kernels (arg 0)
#                       against the fused one (arg 1), 1 and 2 threads, 2 rounds
#   fuse_per_op.txt     pgq train --profile-ops, `medium` F+B and GPT-2 124M's exact shape
#                       F+B, both builds: step, peak memory, kernel time and the ops the
#                       fusions touch
#   fuse_steps_ab.txt   train_step_bench f32, F+B and profiled steps of `medium`, f32 and
#                       F+B at GPT-2's exact shape, medians of 3 repetitions, 2 rounds
#   BASE=/path/to/base/build BASE_REV=1fe7084 bash docs/results/avx512_zen5/fuse_ab.sh   (~25 min)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"
{
  ab_identical "small, f32, 3 steps" --model small --steps 3
  ab_identical_medium | tail -n 1
} >fuse_identical.txt
{
  echo "# elementwise_bench --benchmark_filter='BM_(AttentionSoftmax|AttentionSoftmaxGrad|Swiglu|SwigluGrad)/' --benchmark_min_time=0.3, new build, 2 rounds"
  for round in 1 2; do
    echo "## round $round"
    "$new/bench/elementwise_bench" --benchmark_filter='BM_(AttentionSoftmax|AttentionSoftmaxGrad|Swiglu|SwigluGrad)/' \
      --benchmark_min_time=0.3 2>&1 | sed 's/\x1b\[[0-9;]*m//g' | grep -E '/real_time'
  done
} >fuse_kernel.txt
ops='ms/step \(|kernel time|^  (softmax|softmax_grad|causal_mask|mul|silu|silu_grad|swiglu|swiglu_grad) '
ab_fb_per_op "$ops" >fuse_per_op.txt
ab_steps '(f32Step|quantizedStep|profiledStep)/(medium|medium_FB|gpt2_exact|gpt2_exact_FB)/threads:2' >fuse_steps_ab.txt
