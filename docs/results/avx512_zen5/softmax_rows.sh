#!/bin/bash
# softmax_rows.txt: softmax_rows.cc linked against the kernels of two builds, run in turn:
# the fused softmax before (b72899e) and after (322a5ae) it prefetched the kept part of a
# causal row 4 rows ahead.
#   BEFORE=/path/to/build/of/b72899e AFTER=/path/to/build/of/322a5ae bash softmax_rows.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
  for b in BEFORE AFTER; do
    dir=${!b}
    g++ -std=c++20 -O2 -march=x86-64-v3 -I"$root" "$here/softmax_rows.cc" "$dir/kernels/libpgq_kernels.a" -fopenmp \
      -ldnnl -lfmt -o "$work/rows_$b"
  done
  for round in 1 2; do
    for b in BEFORE AFTER; do
      echo "## round $round, $b (${!b})"
      for batch in 64 12; do "$work/rows_$b" "$batch"; done
    done
  done
} >"$here/softmax_rows.txt"
