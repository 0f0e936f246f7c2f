#!/bin/bash
# Session 25's four changes together (the attention's quantizations item by item in the
# softmax kernels, broadcast copies on all threads, the gradient norm's squares summed in
# the int8 GEMMs' rescale pass, elementwise maps in place) against the build before them
# (6a4f9e4), on this AVX-512 CPU, in turn, nothing else running:
#   s25_identical.txt  checkpoints of both builds after 3 steps (cmp): `medium` with
#                      FB_medium.yaml, GPT-2 124M's exact shape with the F+B recipe the new
#                      build makes from its own profile, and `small` in f32
#   s25_per_op.txt     `pgq train --profile-ops`, 4 steps, of both F+B runs and of `medium`
#                      in f32, both builds: step and kernel time, the ops these changes
#                      touch, the gradient norm
#   s25_steps_ab.txt   train_step_bench f32 and F+B steps of `medium` and of GPT-2 124M's
#                      exact shape, medians of 3 repetitions, 2 rounds
#   BASE=/path/to/base/build BASE_REV=6a4f9e4 bash docs/results/avx512_zen5/s25_ab.sh   (~10 min)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"
"$new/pgq" train --model "$root/bench/gpt2_124m_exact.yaml" --steps 3 --profile-warmup 1 --profile-steps 2 \
  --profile-out "$work/gpt2.yaml" --no-progress --out "$work/gpt2_profile" >/dev/null 2>&1
"$new/pgq" recipe --profile "$work/gpt2.yaml" --hardware machine.yaml --policy F+B -o "$work/gpt2_fb.yaml" >/dev/null
{
  ab_identical_medium
  ab_identical "GPT-2 124M exact shape, F+B recipe, 3 steps" --model "$root/bench/gpt2_124m_exact.yaml" --steps 3 \
    --recipe "$work/gpt2_fb.yaml" | tail -n 1
  ab_identical "small, f32, 3 steps" --model small --steps 3 | tail -n 1
} >s25_identical.txt
pattern='ms/step \(|kernel time|^  (qmatmul|quantize|quant_params|softmax|softmax_grad|broadcast|add|rope)(\+quantize)? |outside'
{
  ab_medium_per_op "$pattern"
  ab_gpt2_per_op "$pattern" --recipe "$work/gpt2_fb.yaml"
  for b in base new; do
    dir=${!b}
    echo "## $b: pgq train --model medium --steps 4 --profile-ops"
    "$dir/pgq" train --model medium --steps 4 --profile-ops --no-progress --out "$work/medium_f32_$b" 2>&1 |
      grep -E "$pattern"
  done
} >s25_per_op.txt
ab_steps '(f32Step|quantizedStep)/(medium|medium_FB|gpt2_exact|gpt2_exact_FB)/threads:2' >s25_steps_ab.txt
