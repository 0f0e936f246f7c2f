#!/bin/bash
# Sourced by this folder's A/B scripts (ab.sh, update_ab.sh, scatter_ab.sh, fold_ab.sh,
# prefetch_ab.sh): `base` is the build directory BASE names, `new` the tree's build/, `work`
# a temporary folder removed at exit; the script then runs in this folder.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
base=${BASE:?BASE=the base build directory}
new=$root/build
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$here"

# ab_steps FILTER: train_step_bench's medians of 3 repetitions in random order, base and
# new in turn, 2 rounds.
ab_steps() {
  local filter=$1 round b dir
  echo "# train_step_bench --benchmark_filter='$filter' --benchmark_min_time=2 --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true, base and new in turn, 2 rounds"
  for round in 1 2; do
    for b in base new; do
      dir=${!b}
      echo "## round $round $b"
      "$dir/bench/train_step_bench" --benchmark_filter="$filter" --benchmark_min_time=2 --benchmark_repetitions=3 \
        --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true 2>&1 | grep -E '_median'
    done
  done
}

# ab_identical_medium WORK: `medium`'s F+B recipe (FB_medium.yaml) trained 3 steps by both
# builds, checkpoints compared byte for byte.
ab_identical_medium() {
  local work=$1 b dir
  echo "# base: $base (${BASE_REV:-revision not given: BASE_REV=...}), new: $new ($(git -C "$root" rev-parse --short HEAD))"
  for b in base new; do
    dir=${!b}
    "$dir/pgq" train --model medium --steps 3 --recipe FB_medium.yaml --no-progress --out "$work/$b" >/dev/null 2>&1
  done
  if cmp "$work/base/checkpoint.pgqckpt" "$work/new/checkpoint.pgqckpt"; then
    echo "medium, F+B recipe FB_medium.yaml, 3 steps: checkpoints equal byte for byte ($(stat -c %s "$work/new/checkpoint.pgqckpt") bytes)"
  else
    echo "medium, F+B recipe FB_medium.yaml, 3 steps: checkpoints DIFFER"
  fi
}

# ab_bench ROUNDS BENCH FILTER [ARGS...]: a Google Benchmark program of both builds in turn,
# ROUNDS rounds, its result lines without colours.
ab_bench() {
  local rounds=$1 bench=$2 filter=$3 round b dir
  shift 3
  echo "# $bench --benchmark_filter='$filter' $*, base and new in turn, $rounds rounds"
  for round in $(seq "$rounds"); do
    for b in base new; do
      dir=${!b}
      echo "## round $round $b"
      "$dir/bench/$bench" --benchmark_filter="$filter" "$@" 2>&1 | sed 's/\x1b\[[0-9;]*m//g' | grep -E '/real_time' | grep -v -E '_(mean|stddev|cv) '
    done
  done
}
