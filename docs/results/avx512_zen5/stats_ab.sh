#!/bin/bash
# Stage (i)'s statistics pass with 512-bit vectors (quant_stats_fused.cc, fusedPair: two
# 32-element blocks a pass) and a forward operand's single format through the fused pass,
# against the build before them, on this AVX-512 CPU, in turn, nothing else running:
#   stats_identical.txt  the profiles of `small` and `medium` (2 warm-up, 2 profiled steps)
#                        written by both builds, compared without their step time
#   stats_kernel.txt     quant_bench grad2 / fwd1 of the new build with its 512-bit paths
#                        and without (grad2_256, fwd1_256), in one process, 2 rounds
#   stats_per_op.txt     pgq train --profile-ops over profiled steps (`small`, `medium`),
#                        both builds: kernel time and quant_stats
#   stats_steps_ab.txt   train_step_bench f32 and profiled steps of `small`, `medium` and
#                        GPT-2's width, medians of 3 repetitions, 2 rounds
#   BASE=/path/to/base/build BASE_REV=424abb6 bash docs/results/avx512_zen5/stats_ab.sh   (~20 min)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"

{
  echo "# base: $base (${BASE_REV:-revision not given: BASE_REV=...}), new: $new ($(git -C "$root" rev-parse --short HEAD))"
  for model in small medium; do
    for b in base new; do
      dir=${!b}
      "$dir/pgq" train --model $model --steps 4 --profile-warmup 2 --profile-steps 2 --profile-out "$work/$model-$b.yaml" \
        --no-progress --out "$work/$model-$b" >/dev/null 2>&1
      grep -v -E '^ *step_ms:' "$work/$model-$b.yaml" >"$work/$model-$b.stats"
    done
    if cmp -s "$work/$model-base.stats" "$work/$model-new.stats"; then
      echo "$model: profiles equal byte for byte without step_ms ($(wc -l <"$work/$model-new.stats") lines)"
    else
      echo "$model: profiles DIFFER"
    fi
  done
} >stats_identical.txt

{
  for round in 1 2; do
    echo "## round $round: quant_bench --benchmark_filter='/(grad2|fwd1)' --benchmark_min_time=0.5"
    "$new/bench/quant_bench" --benchmark_filter='/(grad2|fwd1)' --benchmark_min_time=0.5 2>&1 |
      sed 's/\x1b\[[0-9;]*m//g' | sed -n '/^Stage (i)/,$p'
  done
} >stats_kernel.txt

for model in small medium; do
  for b in base new; do
    dir=${!b}
    echo "## $b: pgq train --model $model --steps 6 --profile-steps 4 --profile-warmup 2 --profile-ops"
    "$dir/pgq" train --model $model --steps 6 --profile-steps 4 --profile-warmup 2 --profile-out "$work/p.yaml" \
      --profile-ops --no-progress --out "$work/per_op_$model$b" 2>&1 | grep -E 'per-op time split|^  quant_stats '
  done
done >stats_per_op.txt

ab_steps '(f32Step|profiledStep)/(small|medium|gpt2_width)/threads:2' >stats_steps_ab.txt
