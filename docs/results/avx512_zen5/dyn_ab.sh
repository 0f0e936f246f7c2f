#!/bin/bash
# Tried and not kept: 60936f4, reverted after these figures (no gain); the script ran at
# 60936f4 and is kept as the record of how the dyn_*.txt were made.
# The scales of a batch of column-scaled operands computed inside their quantize, item by
# item in cache (kernels::quantizeDynamic, CpuBackend::planFusedScales: `medium`'s int8
# attention reads P^T and dS^T once instead of twice) against the build before it, on
# this AVX-512 CPU, in turn, nothing else running:
#   dyn_identical.txt  `medium`'s F+B recipe after 3 steps: checkpoints of both builds (cmp)
#   dyn_per_op.txt     pgq train --profile-ops, `medium` F+B, both builds: kernel time,
#                      quantize and quant_params, and the attention's column-scaled nodes
#   dyn_steps_ab.txt   train_step_bench F+B and f32 steps of `medium`, medians of 3
#                      repetitions, 2 rounds
#   BASE=/path/to/base/build BASE_REV=31e9c51 bash docs/results/avx512_zen5/dyn_ab.sh   (~6 min)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"
ab_identical_medium >dyn_identical.txt
for b in base new; do
  dir=${!b}
  echo "## $b: pgq train --model medium --steps 4 --profile-ops --recipe FB_medium.yaml"
  "$dir/pgq" train --model medium --steps 4 --profile-ops --recipe FB_medium.yaml --no-progress \
    --out "$work/medium_$b" 2>&1 | grep -E 'kernel time|^  (quantize|quant_params) |attn/(av|scores)\.dgrad_rhs\.lhs_(q|scales) '
done >dyn_per_op.txt
ab_steps '(f32Step|quantizedStep)/(medium|medium_FB)/threads:2' >dyn_steps_ab.txt
