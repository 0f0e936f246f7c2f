#!/bin/bash
# Where the steps' wall time goes outside the graph's kernels (session 23, this build alone,
# 2 threads, nothing else running): `pgq train --profile-ops`, 5 steps, f32 and F+B, at
# GPT-2 124M's exact shape (the F+B recipe this build makes from its own profile on
# machine.yaml) and on `medium` (FB_medium.yaml), 2 rounds; the lines that give the wall
# time, the kernel time and the gradient norm and AdamW update outside them.
#   bash docs/results/avx512_zen5/outside_kernels.sh > docs/results/avx512_zen5/outside_kernels.txt   (~4 min)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
pgq=$root/build/pgq
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$here"
echo "# $(git -C "$root" rev-parse --short HEAD), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%F)"
"$pgq" train --model "$root/bench/gpt2_124m_exact.yaml" --steps 3 --profile-warmup 1 --profile-steps 2 \
  --profile-out "$work/gpt2.yaml" --no-progress --out "$work/gpt2_profile" >/dev/null 2>&1
"$pgq" recipe --profile "$work/gpt2.yaml" --hardware machine.yaml --policy F+B -o "$work/gpt2_fb.yaml" >/dev/null 2>&1
pattern='ms/step \(|kernel time|outside the graph'
for round in 1 2; do
  for run in "gpt2_f32 --model $root/bench/gpt2_124m_exact.yaml" \
             "gpt2_fb --model $root/bench/gpt2_124m_exact.yaml --recipe $work/gpt2_fb.yaml" \
             "medium_f32 --model medium" "medium_fb --model medium --recipe FB_medium.yaml"; do
    read -r name args <<<"$run"
    echo "## round $round $name: pgq train $(sed "s|$root/||g; s|$work/||g" <<<"$args") --steps 5 --profile-ops"
    # shellcheck disable=SC2086
    "$pgq" train $args --steps 5 --profile-ops --no-progress --out "$work/${name}_$round" 2>&1 |
      grep -E "$pattern" | sed "s|$work/||g"
  done
done
