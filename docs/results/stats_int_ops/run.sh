#!/bin/bash
# The statistics kernels with fewer operations on the float pipes (stats_sink.h,
# quant_stats_fused.cc) against the build before, in turn, on this machine, 2 threads
# unless said, nothing else running:
#   per_op.txt     pgq train --profile-ops: quant_stats per profiled step of small (5
#                  rounds) and medium (2 rounds), base and new in turn
#   identical.txt  the profiles of small from both builds, timings left out: the int8/int7
#                  defaults, and the 12 schemes and formats of --profile-formats below with
#                  --profile-metrics --profile-outputs
#   kernels.txt    quant_bench, 1 thread, 3 rounds, base and new in turn: the single-format
#                  statistics (int8 rtn/sr, e4m3, mxfp8) and a gradient's four formats (grad4)
#   steps.txt      train_step_bench: f32 and profiled steps of small, medium and GPT-2's
#                  width, medians of 3 repetitions in random order; base, then new
# BASE: a Release build of the code before 60f9438 (its parent, or any commit from dffa83c to it):
#   BASE=/path/to/base/build bash docs/results/stats_int_ops/run.sh     (~25 min)
# OUT: where the files go (default: beside this script; stats_paired/run.sh sets it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../ab_common.sh"
cd "${OUT:-$here}"

quant_stats_ab "small 6 4 5" "medium 4 2 2" >per_op.txt
identical_ab >identical.txt
stats_kernels_ab >kernels.txt

{
  echo "# $cpu"
  filter='(f32Step|profiledStep)/(small|medium|gpt2_width)/threads:2'
  echo "# train_step_bench --benchmark_filter='$filter' --benchmark_min_time=2 --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true"
  for side in base new; do
    echo "## $side"
    "$(dir_of $side)/bench/train_step_bench" --benchmark_filter="$filter" --benchmark_min_time=2 --benchmark_repetitions=3 \
      --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true 2>&1 | grep -E '_median|_cv'
  done
} >steps.txt
