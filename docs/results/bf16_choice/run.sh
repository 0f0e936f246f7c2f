#!/bin/bash
# bf16 as a CPU recipe's third choice (issue 34), on this machine: probe it, profile
# `medium` with bf16's statistics, make the recipes of two policies with and without
# bf16 in the hardware model, and time training steps with each pair in turn.
#   bash docs/results/bf16_choice/run.sh            (from the repository root, ~6 min)
# The step benchmark (train_step_medium_interleaved.txt) is separate:
#   build/bench/train_step_bench --benchmark_filter='(f32Step|bf16Step|mixedStep)/medium' \
#     --benchmark_min_time=6 --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true \
#     --benchmark_report_aggregates_only=true
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
pgq=$root/build/pgq
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$here"

# The machine, and the same model without bf16 GEMMs (so each pair differs in bf16 only).
"$pgq" hwprobe -o machine.yaml >/dev/null
sed 's/^formats: \[int8, bf16\]/formats: [int8]/; s/^name: \(.*\)/name: \1-no-bf16/' machine.yaml >machine_no_bf16.yaml
grep -q '^formats: \[int8\]' machine_no_bf16.yaml

# Two profiled steps of medium (after one) with bf16's statistics beside int8's.
"$pgq" train --model medium --steps 3 --profile-warmup 1 --profile-steps 2 --profile-formats bf16 \
  --profile-out profile_medium.yaml --no-progress --out "$work/profile" >/dev/null 2>&1

# int8-fwd-bf16-bwd: int8 forward, bf16 backward (F); int8-bf16: pgq-default's thresholds (FB).
for hw in machine machine_no_bf16; do
  "$pgq" recipe --profile profile_medium.yaml --hardware $hw.yaml --explain -o F_$hw.yaml \
    --policy "$root/recipes/policies/int8-fwd-bf16-bwd.yaml" >F_$hw.explain.txt
  "$pgq" recipe --profile profile_medium.yaml --hardware $hw.yaml --explain -o FB_$hw.yaml \
    --policy "$root/recipes/policies/int8-bf16.yaml" >FB_$hw.explain.txt
done

# Median step time (steps 2-6 of 6) of one training run with recipe $1.
step_ms() {
  local out=$work/run$RANDOM$RANDOM
  "$pgq" train --model medium --steps 6 --no-progress --recipe "$1" --out "$out" >/dev/null 2>&1
  awk -F, 'NR > 2 { print $7 }' "$out/metrics.csv" | sort -n | awk '{ a[NR] = $1 } END { printf "%.1f", a[int((NR + 1) / 2)] }'
}

{
  echo "# medium, 2 threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"
  echo "# $(grep -m1 '^name:' machine.yaml); median step ms of steps 2-6, the two recipes in turn"
  echo "pair policy with_bf16_ms without_bf16_ms ratio"
  for policy in F FB; do
    step_ms ${policy}_machine.yaml >/dev/null  # warm-up of the pair
    for pair in 1 2 3 4; do
      a=$(step_ms ${policy}_machine.yaml)
      b=$(step_ms ${policy}_machine_no_bf16.yaml)
      echo "$pair $policy $a $b $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')"
    done
  done
} >steps.txt
cat steps.txt
