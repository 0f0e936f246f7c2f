#!/bin/bash
# The many-format statistics pass (kernels/quant_stats_fused.cc) against the build before
# it, on this machine, 2 threads unless said, nothing else running:
#   steps.txt        train_step_bench: f32 and profiled steps of small, medium and GPT-2's
#                    width, medians of 3 repetitions in random order; base, then new
#   per_op.txt       pgq train --profile-ops: where small's profiled step goes; base, new,
#                    base, new
#   kernels.txt      quant_bench, 1 thread: a gradient operand's four formats (int8/int7,
#                    rtn/sr) together and format by format (grad4, grad4_each, new build),
#                    and the single-format kernels, base and new
#   identical.txt    the profiles of small written by both builds, timings left out: equal
#   medium_per_op.txt  where medium's plain and profiled steps go, new build
# BASE: a Release build of the commit before, 6d1f7c5, or one with its code (git worktree add /work/wt-base 6d1f7c5;
# cmake -S /work/wt-base -B /work/wt-base/build -G Ninja -DCMAKE_BUILD_TYPE=Release;
# ninja -C /work/wt-base/build pgq train_step_bench quant_bench).
#   BASE=/work/wt-base/build bash docs/results/stats_fused/run.sh     (~15 min)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
new=$(cd "$here/../../.." && pwd)/build
base=${BASE:?set BASE to the base build directory}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$here"
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), flags: $(grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512_vnni|avx512_bf16|amx_tile)$' | tr '\n' ' ')"
export OMP_NUM_THREADS=2

{
  echo "# $cpu"
  filter='(f32Step|profiledStep)/(small|medium|gpt2_width)/threads:2'
  echo "# train_step_bench --benchmark_filter='$filter' --benchmark_min_time=2 --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true"
  for side in base new; do
    if [ $side = base ]; then dir=$base; else dir=$new; fi
    echo "## $side"
    "$dir/bench/train_step_bench" --benchmark_filter="$filter" --benchmark_min_time=2 --benchmark_repetitions=3 \
      --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true 2>&1 | grep -E '_median|_cv'
  done
} >steps.txt

{
  echo "# $cpu"
  for round in 1 2; do
    for side in base new; do
      if [ $side = base ]; then dir=$base; else dir=$new; fi
      echo "## round $round, $side: pgq train --model small --steps 8 --profile-steps 6 --profile-warmup 2 --profile-ops"
      "$dir/pgq" train --model small --steps 8 --profile-steps 6 --profile-warmup 2 --profile-out "$work/$side.yaml" \
        --profile-ops --no-progress --out "$work/run_${side}_$round" 2>&1 | sed -n '/^per-op time split of the profiled/,/^$/p'
    done
  done
} >per_op.txt
{
  echo "# $cpu"
  echo "## pgq train --model medium --steps 4 --profile-steps 2 --profile-warmup 2 --profile-ops (new)"
  "$new/pgq" train --model medium --steps 4 --profile-steps 2 --profile-warmup 2 --profile-out "$work/medium.yaml" \
    --profile-ops --no-progress --out "$work/medium" 2>&1 | sed -n '/^per-op time split/,$p'
} >medium_per_op.txt
{
  echo "# the profiles of small (8 steps, 6 profiled) from both builds, lines with timings (step_ms) left out"
  if diff <(grep -v '_ms' "$work/base.yaml") <(grep -v '_ms' "$work/new.yaml") >/dev/null; then
    echo "equal: $(grep -vc '_ms' "$work/new.yaml") lines"
  else
    echo "DIFFERENT"
    diff <(grep -v '_ms' "$work/base.yaml") <(grep -v '_ms' "$work/new.yaml") | head -20
  fi
} >identical.txt

{
  echo "# $cpu"
  echo "# quant_bench --benchmark_min_time=0.5, 1 thread; grad4 and grad4_each exist in the new build only"
  for round in 1 2 3; do
    echo "## round $round: new"
    OMP_NUM_THREADS=1 "$new/bench/quant_bench" --benchmark_min_time=0.5 \
      --benchmark_filter='/(grad4|grad4_each)/threads:1' 2>/dev/null | sed -n '/^A gradient operand/,$p'
    for side in base new; do
      if [ $side = base ]; then dir=$base; else dir=$new; fi
      echo "## round $round: $side, single formats"
      OMP_NUM_THREADS=1 "$dir/bench/quant_bench" --benchmark_min_time=0.5 \
        --benchmark_filter='(act2048x1024|weight1024x1024|act2048x256)/(params|stats_rtn|stats_sr)/threads:1' 2>/dev/null |
        sed -n '/^GB\/s per thread/,/^$/p' | grep -v '^$'
    done
  done
} >kernels.txt
