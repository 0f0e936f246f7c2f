#!/bin/bash
# Sourced by this folder's A/B scripts (ab.sh, update_ab.sh, scatter_ab.sh), which set
# `base` and `new` to the two build directories.

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
