#!/bin/bash
# The step time of `pgq train` on a shared machine, against the same step on a quiet one:
#   quiet      one pgq process, nothing else running
#   busy       the same while one CPU-bound process (a shell busy loop) runs beside it
#   pair       two pgq processes started together; each one's step time
# Figures are the median step_ms of each run's metrics.csv, first 2 steps left out
# (primitive creation, first touch). Every pgq process uses all processors (the default).
#
#   bench/shared_machine.sh [PGQ] [MODEL] [STEPS] [-- ENV=VALUE ...]
#   bench/shared_machine.sh build/pgq small 10 -- OMP_WAIT_POLICY=active
# ENV assignments after `--` are given to every pgq process (e.g. to compare wait
# policies; pgq's own default is OMP_WAIT_POLICY=passive, kernels/threads.h).
set -euo pipefail
pgq=${1:-build/pgq}; model=${2:-small}; steps=${3:-10}
shift $(( $# < 3 ? $# : 3 ))
[[ ${1:-} == -- ]] && shift
envs=("$@")
dir=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT

train() {  # train OUT: runs pgq, leaves OUT/metrics.csv
  env "${envs[@]}" "$pgq" train --model "$model" --steps "$steps" --out "$1" --no-progress \
      --eval-every 0 --eval-batches 1 --warmup 1 >"$1.log" 2>&1
}
median_step() {  # median step_ms of steps 3.. of OUT/metrics.csv
  awk -F, 'NR==1{for(i=1;i<=NF;i++) if($i=="step_ms") c=i; next} NR>3 && $c!=""{print $c}' "$1/metrics.csv" |
    sort -n | awk '{v[NR]=$1} END{printf "%.1f", NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'
}

train "$dir/quiet"; quiet=$(median_step "$dir/quiet")
sh -c 'while :; do :; done' & spinner=$!
train "$dir/busy"; kill $spinner; wait $spinner 2>/dev/null || true
busy=$(median_step "$dir/busy")
train "$dir/pair1" & p1=$!; train "$dir/pair2" & p2=$!; wait $p1 $p2
pair1=$(median_step "$dir/pair1"); pair2=$(median_step "$dir/pair2")
printf "%-30s %10s %10s %10s %10s\n" "${envs[*]:-(pgq default)}" quiet busy pair1 pair2
printf "%-30s %10s %10s %10s %10s\n" "step ms" "$quiet" "$busy" "$pair1" "$pair2"
awk -v q="$quiet" -v b="$busy" -v p="$pair1" -v r="$pair2" \
  'BEGIN{printf "%-30s %10s %9.2fx %9.2fx %9.2fx\n", "vs quiet", "1.00x", b/q, p/q, r/q}'
