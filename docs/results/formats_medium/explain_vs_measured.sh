#!/bin/sh
# Issue 31's acceptance: `pgq recipe --hardware h100-sxm --explain` on medium's profile at
# 16x its tokens (32K per step), every GEMM in FP8 so each row shows its FP8 estimate,
# against the H100's measured GEMM times (tests/data/gpu/h100/gemm.csv). Seconds.
set -eu
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"
HERE=docs/results/formats_medium
PGQ=${PGQ:-$ROOT/build/pgq}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
sed 's/^min_speedup: .*/min_speedup: 0/; s/^name: \(.*\)/name: \1-all/' recipes/policies/fp8-delayed.yaml > "$OUT/all.yaml"
$PGQ recipe --profile "$HERE/prof.yaml" --hardware h100-sxm --policy "$OUT/all.yaml" --token-scale 16 \
  -o "$OUT/r.yaml" --explain > "$HERE/explain_h100_x16.txt"
/usr/bin/python3 "$HERE/explain_vs_measured.py" "$HERE/explain_h100_x16.txt" tests/data/gpu/h100/gemm.csv \
  | tee "$HERE/explain_vs_measured.txt"
