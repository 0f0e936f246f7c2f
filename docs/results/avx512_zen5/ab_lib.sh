#!/bin/bash
# Sourced by this folder's A/B scripts (ab.sh, update_ab.sh, scatter_ab.sh, fold_ab.sh, fuse_ab.sh, norm_ab.sh,
# prefetch_ab.sh, zp_ab.sh, items_ab.sh, s25_ab.sh, softmax_inplace_ab.sh): `base` is the build directory BASE names,
# `new` the tree's build/, `work` a temporary folder removed at exit; the script then runs in this folder.
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

# ab_identical LABEL TRAIN_ARGS...: `pgq train TRAIN_ARGS` run by both builds (in $work),
# checkpoints compared byte for byte; one line after the builds' header.
ab_identical() {
  local label=$1 b dir
  shift
  echo "# base: $base (${BASE_REV:-revision not given: BASE_REV=...}), new: $new ($(git -C "$root" rev-parse --short HEAD))"
  for b in base new; do
    dir=${!b}
    rm -rf "$work/$b"
    "$dir/pgq" train "$@" --no-progress --out "$work/$b" >/dev/null 2>&1
  done
  if cmp "$work/base/checkpoint.pgqckpt" "$work/new/checkpoint.pgqckpt"; then
    echo "$label: checkpoints equal byte for byte ($(stat -c %s "$work/new/checkpoint.pgqckpt") bytes)"
  else
    echo "$label: checkpoints DIFFER"
  fi
}

# ab_identical_medium: `medium`'s F+B recipe (FB_medium.yaml) trained 3 steps by both builds.
ab_identical_medium() {
  ab_identical "medium, F+B recipe FB_medium.yaml, 3 steps" --model medium --steps 3 --recipe FB_medium.yaml
}

# ab_gpt2_per_op PATTERN [TRAIN_ARGS...]: `pgq train --profile-ops` at GPT-2 124M's exact
# shape, 4 steps, both builds: the per-op lines PATTERN (grep -E) selects.
ab_gpt2_per_op() {
  local pattern=$1 b dir
  shift
  for b in base new; do
    dir=${!b}
    echo "## $b: pgq train --model bench/gpt2_124m_exact.yaml --steps 4 --profile-ops $*"
    "$dir/pgq" train --model "$root/bench/gpt2_124m_exact.yaml" --steps 4 --profile-ops "$@" --no-progress \
      --out "$work/gpt2_$b" 2>&1 | grep -E "$pattern"
  done
}

# ab_medium_per_op PATTERN: `pgq train --profile-ops`, 4 steps, of `medium`'s F+B recipe
# (FB_medium.yaml), both builds: the lines PATTERN (grep -E) selects.
ab_medium_per_op() {
  local pattern=$1 b dir
  for b in base new; do
    dir=${!b}
    echo "## $b: pgq train --model medium --steps 4 --profile-ops --recipe FB_medium.yaml"
    rm -rf "$work/medium_$b"  # a run called again starts afresh
    "$dir/pgq" train --model medium --steps 4 --profile-ops --recipe FB_medium.yaml --no-progress \
      --out "$work/medium_$b" 2>&1 | grep -E "$pattern"
  done
}

# ab_fb_per_op PATTERN: ab_medium_per_op, then GPT-2 124M's exact shape with the F+B recipe
# the new build makes from its own profile, both builds: the lines PATTERN (grep -E) selects.
ab_fb_per_op() {
  local pattern=$1
  ab_medium_per_op "$pattern"
  "$new/pgq" train --model "$root/bench/gpt2_124m_exact.yaml" --steps 3 --profile-warmup 1 --profile-steps 2 \
    --profile-out "$work/gpt2.yaml" --no-progress --out "$work/gpt2_profile" >/dev/null 2>&1
  "$new/pgq" recipe --profile "$work/gpt2.yaml" --hardware machine.yaml --policy F+B -o "$work/gpt2_fb.yaml" >/dev/null
  ab_gpt2_per_op "$pattern" --recipe "$work/gpt2_fb.yaml"
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
