#!/bin/bash
# Issue 34's figures on an AVX-512 VNNI CPU without AMX (the AMD EPYC Zen 5 the issue was
# filed on: AVX-512, AVX512-VNNI, AVX512-BF16), this build alone, 2 threads, nothing else
# running:
#   machine.yaml          pgq hwprobe (the ISA oneDNN dispatches to, the measured rates)
#   steps.txt             train_step_bench: f32, bf16, F+B and profiled steps, medians of 3
#                         repetitions in random order (the F+B recipes are the F+B policy's
#                         for the shipped epyc-zen3-2c model, made by the benchmark, as in
#                         the other machines' sections)
#   per_op.txt            where medium's f32 and F+B steps go (pgq train --profile-ops; the
#                         F+B recipe FB_medium.yaml from profile_medium.yaml, this machine's
#                         probed model machine.yaml)
#   gpt2_exact_per_op.txt the same at GPT-2 124M's exact shape (bench/gpt2_124m_exact.yaml)
#   profiled_per_op.txt   where the profiled steps of `small` and `medium` go
#   contention.txt        bench/shared_machine.sh: the step beside one busy process
#   perf_smoke.txt        build/bench/perf_smoke
#   bash docs/results/avx512_zen5/run.sh [PART...]   (~8 min; PART: steps per_op gpt2
#                                                    profiled contention smoke; default all)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
pgq=$root/build/pgq
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$here"
parts=${*:-steps per_op gpt2 profiled contention smoke}
want() { [[ " $parts " == *" $1 "* ]]; }

want steps && "$pgq" hwprobe --seconds 1 -o machine.yaml >/dev/null
want steps && {
  echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), flags: $(grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|avx2|fma|avx512f|avx512_vnni|avx512_bf16|amx_tile)$' | tr '\n' ' ')"
  echo "# commit $(git -C "$root" rev-parse --short HEAD)"
  filter='(f32Step|bf16Step|quantizedStep|profiledStep)/(small|small_FB|medium|medium_FB|gpt2_exact|gpt2_exact_FB|gpt2_width|gpt2_width_FB)/threads:2'
  echo "# build/bench/train_step_bench --benchmark_filter='$filter' --benchmark_min_time=2 --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true"
  "$root/build/bench/train_step_bench" --benchmark_filter="$filter" --benchmark_min_time=2 --benchmark_repetitions=3 \
    --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true 2>&1 | grep -E '_median|_cv|^Run|^CPU|^Load'
} >steps.txt

want per_op && "$pgq" train --model medium --steps 3 --profile-warmup 1 --profile-steps 2 \
  --profile-out profile_medium.yaml --no-progress --out "$work/profile" >/dev/null 2>&1
want per_op && "$pgq" recipe --profile profile_medium.yaml --hardware machine.yaml --policy F+B -o FB_medium.yaml >/dev/null
want per_op && {
  for recipe in "" "--recipe FB_medium.yaml"; do
    echo "## pgq train --model medium --steps 4 --profile-ops $recipe"
    "$pgq" train --model medium --steps 4 --profile-ops $recipe --no-progress --out "$work/run$RANDOM" 2>&1 \
      | sed -n '/^per-op time split/,$p'
  done
} >per_op.txt

gpt2=$root/bench/gpt2_124m_exact.yaml
want gpt2 && "$pgq" train --model "$gpt2" --steps 3 --profile-warmup 1 --profile-steps 2 \
  --profile-out "$work/gpt2.yaml" --no-progress --out "$work/gpt2_profile" >/dev/null 2>&1
want gpt2 && "$pgq" recipe --profile "$work/gpt2.yaml" --hardware machine.yaml --policy F+B -o "$work/gpt2_fb.yaml" >/dev/null
want gpt2 && {
  for recipe in "" "--recipe F+B"; do
    echo "## pgq train --model bench/gpt2_124m_exact.yaml --steps 4 --profile-ops ${recipe:+--recipe F+B_recipe_for_machine.yaml}"
    "$pgq" train --model "$gpt2" --steps 4 --profile-ops ${recipe:+--recipe "$work/gpt2_fb.yaml"} --no-progress \
      --out "$work/gpt2_run$RANDOM" 2>&1 | sed -n '/^per-op time split/,$p'
  done
} >gpt2_exact_per_op.txt

want profiled && {
  for model in small medium; do
    echo "## pgq train --model $model --steps 6 --profile-steps 4 --profile-warmup 2 --profile-ops"
    "$pgq" train --model $model --steps 6 --profile-steps 4 --profile-warmup 2 --profile-out "$work/p.yaml" \
      --profile-ops --no-progress --out "$work/$model" 2>&1 | sed -n '/^per-op time split/,$p'
  done
} >profiled_per_op.txt

want contention && {
  echo "# bench/shared_machine.sh build/pgq small 12"
  bash "$root/bench/shared_machine.sh" "$pgq" small 12
} >contention.txt

if want smoke; then "$root/build/bench/perf_smoke" >perf_smoke.txt 2>&1; fi
