#!/bin/bash
# The step's non-GEMM kernels (issue 34, part): this build against a base build, in turn,
# on the same machine in one sitting. BASE is a Release build of the commit before
# (git worktree add /work/wt-base d184bfa; cmake -S /work/wt-base -B /work/wt-base/build
# -G Ninja -DCMAKE_BUILD_TYPE=Release; build the targets pgq, train_step_bench, quant_bench).
#   BASE=/work/wt-base/build bash docs/results/step_kernels/run.sh      (~30 min)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
base=${BASE:?set BASE to the base build directory}
new=$root/build
cd "$here"
filter='(f32Step|profiledStep|quantizedStep)/(small|small_FB|medium|medium_FB|gpt2_width|gpt2_width_FB)/threads:2'
: >steps_ab.txt
for round in 1 2; do
  for side in base new; do
    dir=$base; [ $side = new ] && dir=$new
    echo "## round $round: $side ($dir)" >>steps_ab.txt
    "$dir/bench/train_step_bench" --benchmark_filter="$filter" --benchmark_min_time=3 2>/dev/null \
      | grep -E '^(f32Step|profiledStep|quantizedStep)' >>steps_ab.txt
  done
done
: >stats_ab.txt
for round in 1 2; do
  for side in base new; do
    dir=$base; [ $side = new ] && dir=$new
    echo "## round $round: $side" >>stats_ab.txt
    "$dir/bench/quant_bench" --benchmark_min_time=0.5 --benchmark_filter='/(stats_rtn|stats_sr)/' 2>/dev/null \
      | sed -n '/^GB\/s per thread/,/^$/p' >>stats_ab.txt
  done
done

# The per-op split of `medium` (f32, and int8 F+B with bf16_choice's no-bf16 recipe), both builds.
for side in base new; do
  dir=$base; [ $side = new ] && dir=$new
  for recipe in "" "--recipe $root/docs/results/bf16_choice/FB_machine_no_bf16.yaml"; do
    out=$(mktemp -d)
    echo "## $side: pgq train --model medium --steps 4 --profile-ops $recipe" | sed "s|$root/||"
    "$dir/pgq" train --model medium --steps 4 --profile-ops $recipe --no-progress --out "$out/run" 2>&1 \
      | sed -n '/^per-op time split/,$p'
    echo
    rm -rf "$out"
  done
done >per_op.txt

# This build alone: the steps (medians of 3 repetitions in random order) and GPT-2 124M's
# linears at 256 tokens with and without AMX (gpt2_exact_per_op.txt: pgq train
# --profile-ops of bench/gpt2_124m_exact.yaml with gpt2_exact_fb.yaml, the F+B recipe
# from a 2-step profile on epyc-zen3-2c, before and after the row-major copy of A).
{
  echo "# build/bench/train_step_bench --benchmark_filter='(f32Step|quantizedStep|profiledStep)/(small|small_FB|medium|medium_FB|gpt2_exact|gpt2_exact_FB|gpt2_width|gpt2_width_FB)/threads:2' --benchmark_min_time=2 --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true"
  "$new/bench/train_step_bench" --benchmark_filter='(f32Step|quantizedStep|profiledStep)/(small|small_FB|medium|medium_FB|gpt2_exact|gpt2_exact_FB|gpt2_width|gpt2_width_FB)/threads:2' \
    --benchmark_min_time=2 --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true \
    --benchmark_report_aggregates_only=true 2>&1
} >steps_new.txt
for isa in default AVX512_CORE_VNNI; do
  echo "## ONEDNN_MAX_CPU_ISA=$isa: build/bench/gemm_bench --benchmark_filter='gpt2_124m.*/(f32|int8_raw)/threads:2' --benchmark_min_time=0.5"
  if [ $isa = default ]; then env -u ONEDNN_MAX_CPU_ISA "$new/bench/gemm_bench" --benchmark_filter='gpt2_124m.*/(f32|int8_raw)/threads:2' --benchmark_min_time=0.5
  else ONEDNN_MAX_CPU_ISA=$isa "$new/bench/gemm_bench" --benchmark_filter='gpt2_124m.*/(f32|int8_raw)/threads:2' --benchmark_min_time=0.5; fi 2>&1 \
    | grep -E "^gpt2|^shape"
done >gemm_gpt2.txt
