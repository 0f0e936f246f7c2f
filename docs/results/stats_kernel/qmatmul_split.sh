#!/bin/bash
# How much of `medium`'s int8 GEMM time is oneDNN's: the int8 (u8 x s8) matmul times that
# ONEDNN_VERBOSE prints, summed per step, beside --profile-ops' qmatmul (which adds the
# rescale pass and the row-major copy of a transposed A). Verbose logging slows both a
# little. bash docs/results/stats_kernel/qmatmul_split.sh  (~1 min)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=$(mktemp -d)
steps=3
ONEDNN_VERBOSE=1 "$root/build/pgq" train --model medium --steps $steps --profile-ops \
  --recipe "$root/docs/results/bf16_choice/FB_machine_no_bf16.yaml" --no-progress --out "$out/run" >"$out/log" 2>&1
{
  echo "# ONEDNN_VERBOSE=1 build/pgq train --model medium --steps $steps --profile-ops --recipe docs/results/bf16_choice/FB_machine_no_bf16.yaml"
  grep '^onednn_verbose,exec' "$out/log" | awk -F, -v steps=$steps \
    '/src_u8/ {s += $NF; n++} END {printf "oneDNN u8 x s8 matmuls: %d calls, %.1f ms per step\n", n, s / steps}'
  grep -E 'kernel time|^  qmatmul' "$out/log"
} >"$here/qmatmul_split.txt"
rm -rf "$out"
