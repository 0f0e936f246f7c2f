#!/bin/bash
# Issue 34's figures on an AVX2-only CPU (AMD EPYC Zen 3: no AVX-512, no VNNI, no bf16
# dot products), this build alone, 2 threads, nothing else running:
#   machine.yaml          pgq hwprobe (the ISA oneDNN dispatches to, the measured rates)
#   steps.txt             train_step_bench: f32, F+B and profiled steps, medians of 3
#                         repetitions in random order (the recipes are the F+B policy's for
#                         the shipped epyc-zen3-2c model, made by the benchmark)
#   per_op.txt            where medium's f32 and F+B steps go (pgq train --profile-ops; the
#                         F+B recipe FB_medium.yaml from profile_medium.yaml, epyc-zen3-2c)
#   contention.txt        bench/shared_machine.sh: the step beside one busy process
#   profiled_small_per_op.txt  where the profiled step of `small` goes
#   perf_smoke.txt        build/bench/perf_smoke
#   bash docs/results/avx2_zen3/run.sh          (~25 min)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
pgq=$root/build/pgq
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$here"

"$pgq" hwprobe --seconds 1 -o machine.yaml >/dev/null
{
  echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), flags: $(grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|avx2|fma|avx512f|avx512_vnni|avx512_bf16|amx_tile)$' | tr '\n' ' ')"
  filter='(f32Step|quantizedStep|profiledStep)/(small|small_FB|medium|medium_FB|gpt2_exact|gpt2_exact_FB|gpt2_width|gpt2_width_FB)/threads:2'
  echo "# build/bench/train_step_bench --benchmark_filter='$filter' --benchmark_min_time=2 --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true"
  "$root/build/bench/train_step_bench" --benchmark_filter="$filter" --benchmark_min_time=2 --benchmark_repetitions=3 \
    --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true 2>&1 | grep -E '_median|_cv|^Run|^CPU|^Load'
} >steps.txt

"$pgq" train --model medium --steps 3 --profile-warmup 1 --profile-steps 2 \
  --profile-out profile_medium.yaml --no-progress --out "$work/profile" >/dev/null 2>&1
"$pgq" recipe --profile profile_medium.yaml --hardware epyc-zen3-2c --policy F+B -o FB_medium.yaml >/dev/null
{
  for recipe in "" "--recipe FB_medium.yaml"; do
    echo "## pgq train --model medium --steps 4 --profile-ops $recipe"
    "$pgq" train --model medium --steps 4 --profile-ops $recipe --no-progress --out "$work/run$RANDOM" 2>&1 \
      | sed -n '/^per-op time split/,$p'
  done
} >per_op.txt

{
  echo "# bench/shared_machine.sh build/pgq small 12"
  bash "$root/bench/shared_machine.sh" "$pgq" small 12
} >contention.txt

# The profiled step of `small` split by op (quant_stats: the statistics kernel), and the
# perf smoke as CI runs it.
{
  echo "## pgq train --model small --steps 8 --profile-steps 6 --profile-warmup 2 --profile-ops"
  "$pgq" train --model small --steps 8 --profile-steps 6 --profile-warmup 2 --profile-out "$work/p.yaml" \
    --profile-ops --no-progress --out "$work/small" 2>&1 | sed -n '/^per-op time split of the profiled/,/^$/p'
} >profiled_small_per_op.txt
"$root/build/bench/perf_smoke" >perf_smoke.txt 2>&1
