#!/bin/bash
# A constant lhs zero point subtracted in pgq's rescale pass where K is short against M
# (int8_gemm.cc zc_here; commit 933c8d9, reverted in bd0fa8f: no gain), a build of 933c8d9
# against the build before it (df5285b), on this AVX-512 CPU, in turn, nothing else running
# (run from a checkout of 933c8d9, whose build/ is the new build):
#   zp_identical.txt  checkpoints of both builds after 3 steps (cmp): GPT-2 124M's exact
#                     shape with the F+B recipe the new build makes from its own profile,
#                     and `medium` with FB_medium.yaml
#   zp_kernel.txt     gemm_bench int8_raw (operands quantized beforehand) at GPT-2 124M's
#                     shapes, base and new in turn, 2 rounds (its first run, at 933c8d9, kept
#                     only the summary table's empty columns and was removed; tried_s24.txt
#                     has the figures, measured by hand)
#   zp_per_op.txt     `pgq train --profile-ops` at GPT-2's exact shape with that recipe,
#                     4 steps, both builds: qmatmul and the slowest GEMMs
#   zp_steps_ab.txt   train_step_bench f32 and F+B steps of `medium` and of GPT-2 124M's
#                     exact shape, medians of 3 repetitions, 2 rounds
#   BASE=/path/to/base/build BASE_REV=df5285b bash docs/results/avx512_zen5/zp_ab.sh   (~20 min)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"
"$new/pgq" train --model "$root/bench/gpt2_124m_exact.yaml" --steps 3 --profile-warmup 1 --profile-steps 2 \
  --profile-out "$work/gpt2.yaml" --no-progress --out "$work/gpt2_profile" >/dev/null 2>&1
"$new/pgq" recipe --profile "$work/gpt2.yaml" --hardware machine.yaml --policy F+B -o "$work/gpt2_fb.yaml" >/dev/null
{
  ab_identical "GPT-2 124M exact shape, F+B recipe, 3 steps" --model "$root/bench/gpt2_124m_exact.yaml" --steps 3 \
    --recipe "$work/gpt2_fb.yaml"
  ab_identical_medium | tail -n 1
} >zp_identical.txt
ab_bench 2 gemm_bench 'gpt2_124m.*int8_raw' --benchmark_min_time=0.5 >zp_kernel.txt
ab_gpt2_per_op 'kernel time|^  qmatmul|^  get_logits|wgrad  ' --recipe "$work/gpt2_fb.yaml" >zp_per_op.txt
ab_steps '(f32Step|quantizedStep)/(medium|medium_FB|gpt2_exact|gpt2_exact_FB)/threads:2' >zp_steps_ab.txt
