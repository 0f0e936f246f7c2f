#!/bin/bash
# The profiler's statistics kernel and the symmetric scales pass (issue 34, part): this
# build against a base build, in turn, on the same machine in one sitting. BASE is a
# Release build of fde71ab (git worktree add /work/wt-base fde71ab; cmake -S /work/wt-base
# -B /work/wt-base/build -G Ninja -DCMAKE_BUILD_TYPE=Release; build the targets pgq,
# train_step_bench, quant_bench).
#   BASE=/work/wt-base/build bash docs/results/stats_kernel/run.sh      (~8 min)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
base=${BASE:?set BASE to the base build directory}
new=$root/build
cd "$here"
side_dir() { if [ "$1" = base ]; then echo "$base"; else echo "$new"; fi; }

# quant_bench, 1 thread (the kernels alone; 2 vCPUs that share a core are noisy at 2
# threads): 5 rounds, base and new in turn, GB/s per thread as quant_bench prints them.
{
  echo "# quant_bench --benchmark_min_time=0.3 --benchmark_filter='(act2048x1024|weight1024x1024)/(params|dynamic|stats_rtn|stats_sr|stats_e4m3|stats_mxfp8)/threads:1'"
  for round in 1 2 3 4 5; do
    for side in base new; do
      echo "## round $round: $side"
      "$(side_dir $side)/bench/quant_bench" --benchmark_min_time=0.3 \
        --benchmark_filter='(act2048x1024|weight1024x1024)/(params|dynamic|stats_rtn|stats_sr|stats_e4m3|stats_mxfp8)/threads:1' 2>/dev/null \
        | grep -E '^(tensor|act2048x1024 |weight1024x1024 )'
    done
  done
} >quant_ab.txt

# In the step: the per-op split of `small`'s profiled steps (stage i, default formats) and
# of `medium`'s int8 F+B steps, both builds in turn, two rounds.
{
  for round in 1 2; do
    for side in base new; do
      out=$(mktemp -d)
      echo "## round $round: $side: pgq train --model small --steps 8 --profile-steps 6 --profile-warmup 2 --profile-ops"
      "$(side_dir $side)/pgq" train --model small --steps 8 --profile-steps 6 --profile-warmup 2 \
        --profile-out "$out/p.yaml" --profile-ops --no-progress --out "$out/run" 2>&1 \
        | sed -n '/^per-op time split of the profiled/,/^$/p' | head -6
      echo "## round $round: $side: pgq train --model medium --steps 4 --profile-ops --recipe docs/results/bf16_choice/FB_machine_no_bf16.yaml"
      "$(side_dir $side)/pgq" train --model medium --steps 4 --profile-ops \
        --recipe "$root/docs/results/bf16_choice/FB_machine_no_bf16.yaml" --no-progress --out "$out/run2" 2>&1 \
        | sed -n '/^per-op time split/,/^$/p' | head -6
      rm -rf "$out"
    done
  done
} >per_op_ab.txt

# This build alone: the steps, medians of 3 repetitions in random order.
{
  filter='(f32Step|quantizedStep|profiledStep)/(small|small_FB|medium|medium_FB|gpt2_exact|gpt2_exact_FB|gpt2_width|gpt2_width_FB)/threads:2'
  echo "# build/bench/train_step_bench --benchmark_filter='$filter' --benchmark_min_time=2 --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true"
  "$new/bench/train_step_bench" --benchmark_filter="$filter" --benchmark_min_time=2 --benchmark_repetitions=3 \
    --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true 2>&1 | grep -E '_median|^Run|^CPU|^Load'
} >steps.txt
