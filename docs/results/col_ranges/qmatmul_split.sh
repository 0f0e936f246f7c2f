#!/bin/bash
# How much of medium's int8 GEMM time on this CPU is oneDNN's: the u8 x s8 matmul times
# that ONEDNN_VERBOSE prints, summed per step, beside --profile-ops' qmatmul (which adds
# the rescale pass). Verbose logging slows both a little.
#   bash docs/results/col_ranges/qmatmul_split.sh  (~1 min)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
steps=3
OMP_NUM_THREADS=2 ONEDNN_VERBOSE=1 "$root/build/pgq" train --model medium --steps $steps --profile-ops \
  --recipe "$root/docs/results/avx2_zen3/FB_medium.yaml" --no-progress --out "$out/run" >"$out/log" 2>&1
{
  echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')"
  echo "# ONEDNN_VERBOSE=1 build/pgq train --model medium --steps $steps --profile-ops --recipe docs/results/avx2_zen3/FB_medium.yaml"
  grep '^onednn_verbose,exec' "$out/log" | awk -F, -v steps=$steps \
    '/src_u8/ {s += $NF; n++; impl[$5]++} END {printf "oneDNN u8 x s8 matmuls: %d calls, %.1f ms per step; implementations:", n, s / steps; for (i in impl) printf " %s (%d)", i, impl[i]; print ""}'
  grep -E 'kernel time|^  qmatmul|^  quantize |^  quant_params' "$out/log" | head -4
} >"$here/qmatmul_split.txt"
