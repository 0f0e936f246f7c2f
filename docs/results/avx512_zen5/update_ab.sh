#!/bin/bash
# The weights' int8 copies made by the optimizer's update (kernels::adamwUpdateQuantized,
# Executor::parameterQuantizations) against the build before it, on this AVX-512 CPU, in
# turn, nothing else running:
#   update_identical.txt  checkpoints of both builds: medium's F+B recipe after 3 steps,
#                         and `small` with a profiled stretch (F+B_SR recipe) after 5
#   update_kernel.txt     elementwise_bench AdamWQuantize: a GPT-2 MLP weight [768, 3072],
#                         the update alone, then the graph's two quantizations, or fused;
#                         quant_bench's quantizeDynamic, both builds
#   update_steps_ab.txt   train_step_bench: small, medium, GPT-2 124M's exact shape, f32
#                         and F+B, medians of 3 repetitions, 2 rounds, with peak memory
#   update_per_op.txt     pgq train --profile-ops at GPT-2 124M's exact shape, F+B (the F+B
#                         policy's recipe for machine.yaml), both builds: the graph's kernels
#   BASE=/path/to/base/build BASE_REV=e4bd30f bash docs/results/avx512_zen5/update_ab.sh [PART...]
#   (~14 min; PART: identical kernel steps per_op; default all)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"
parts=${*:-identical kernel steps per_op}
want() { [[ " $parts " == *" $1 "* ]]; }
want identical && {
  echo "# base: $base (${BASE_REV:-revision not given: BASE_REV=...}), new: $new ($(git -C "$root" rev-parse --short HEAD))"
  for b in base new; do
    dir=${!b}
    "$dir/pgq" train --model medium --steps 3 --recipe FB_medium.yaml --no-progress --out "$work/$b" >/dev/null 2>&1
    # The same paths for both builds (a checkpoint records its recipe's path).
    mkdir -p "$work/small"
    rm -rf "$work/small/"*
    # small: a profile then its F+B_SR recipe, steps 1-2 plain, 3-4 profiled, 5 plain.
    "$dir/pgq" train --model small --steps 3 --profile-warmup 1 --profile-steps 2 --profile-out "$work/small/p.yaml" \
      --no-progress --out "$work/small/profile" >/dev/null 2>&1
    "$dir/pgq" recipe --profile "$work/small/p.yaml" --hardware machine.yaml --policy F+B_SR -o "$work/small/sr.yaml" \
      >/dev/null 2>&1
    "$dir/pgq" train --model small --steps 5 --recipe "$work/small/sr.yaml" --profile-warmup 2 --profile-steps 2 \
      --profile-out "$work/small/p2.yaml" --no-progress --out "$work/small/run" >/dev/null 2>&1
    mv "$work/small/run" "$work/$b-small"
  done
  for run in "" "-small"; do
    what=$([ -z "$run" ] && echo "medium, F+B recipe FB_medium.yaml, 3 steps" ||
      echo "small, F+B_SR recipe, 5 steps of which 3-4 profiled")
    if cmp "$work/base$run/checkpoint.pgqckpt" "$work/new$run/checkpoint.pgqckpt"; then
      echo "$what: checkpoints equal byte for byte ($(stat -c %s "$work/new$run/checkpoint.pgqckpt") bytes)"
    else
      echo "$what: checkpoints DIFFER"
    fi
  done
} >update_identical.txt
want kernel && {
  echo "# build/bench/elementwise_bench --benchmark_filter=AdamWQuantize --benchmark_min_time=1 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true"
  "$new/bench/elementwise_bench" --benchmark_filter=AdamWQuantize --benchmark_min_time=1 --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true 2>&1 | grep -E '_median'
  # quantizeDynamic now walks its rows through the function the fused update shares.
  filter='(act2048x1024|weight1024x1024)/dynamic/threads'
  echo "# quant_bench --benchmark_filter='$filter' --benchmark_min_time=0.5, base and new in turn, 2 rounds"
  for round in 1 2; do
    for b in base new; do
      dir=${!b}
      echo "## round $round $b"
      "$dir/bench/quant_bench" --benchmark_filter="$filter" --benchmark_min_time=0.5 2>&1 |
        sed 's/\x1b\[[0-9;]*m//g' | grep 'dynamic/threads'
    done
  done
} >update_kernel.txt
want steps && {
  ab_steps '(f32Step|quantizedStep)/(small|small_FB|medium|medium_FB|gpt2_exact|gpt2_exact_FB)/threads:2'
} >update_steps_ab.txt
gpt2=$root/bench/gpt2_124m_exact.yaml
want per_op && "$new/pgq" train --model "$gpt2" --steps 3 --profile-warmup 1 --profile-steps 2 \
  --profile-out "$work/gpt2.yaml" --no-progress --out "$work/gpt2_profile" >/dev/null 2>&1
want per_op && "$new/pgq" recipe --profile "$work/gpt2.yaml" --hardware machine.yaml --policy F+B -o "$work/gpt2_fb.yaml" \
  >/dev/null 2>&1
want per_op && {
  for b in base new; do
    dir=${!b}
    echo "## $b: pgq train --model bench/gpt2_124m_exact.yaml --steps 4 --profile-ops --recipe F+B_recipe_for_machine.yaml"
    "$dir/pgq" train --model "$gpt2" --steps 4 --profile-ops --recipe "$work/gpt2_fb.yaml" --no-progress \
      --out "$work/gpt2_$b" 2>&1 | sed -n '/^per-op time split/,/^$/p'
  done
} >update_per_op.txt
