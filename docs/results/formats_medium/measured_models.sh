#!/bin/sh
# Issue 31: the GPU recipes of this profile again, with the measured H100 model
# (recipes/hardware/h100-sxm.yaml) and the B200 preset scaled from it, beside the
# datasheet models they replace (read from git at the commit before them). Seconds.
set -eu
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"
HERE=docs/results/formats_medium
PGQ=${PGQ:-$ROOT/build/pgq}
POL=recipes/policies
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
mkdir -p "$HERE/recipes_measured"
git -C "$ROOT" show f6b4511:recipes/hardware/h100-sxm.yaml > "$OUT/h100-datasheet.yaml"
git -C "$ROOT" show f6b4511:recipes/hardware/b200.yaml > "$OUT/b200-datasheet.yaml"
for p in fp8-delayed mxfp8; do
  sed 's/^min_speedup: .*/min_speedup: 0/; s/^name: \(.*\)/name: \1-all/' "$POL/$p.yaml" > "$OUT/$p-all.yaml"
done
for hw in h100-sxm "$OUT/h100-datasheet.yaml"; do
  t=$(basename "$hw" .yaml)
  $PGQ recipe --profile "$HERE/prof.yaml" --hardware "$hw" --policy "$POL/fp8-delayed.yaml" --token-scale 16 \
    -o "$HERE/recipes_measured/${t}_fp8_delayed_x16.yaml" --explain > "$HERE/recipes_measured/${t}_fp8_delayed_x16.txt"
  for x in 1 16; do
    $PGQ recipe --profile "$HERE/prof.yaml" --hardware "$hw" --policy "$OUT/fp8-delayed-all.yaml" --token-scale $x \
      -o "$OUT/est.yaml" --explain > "$HERE/recipes_measured/est_${t}_fp8_all_x$x.txt"
  done
done
for hw in b200 "$OUT/b200-datasheet.yaml"; do
  t=$(basename "$hw" .yaml)
  $PGQ recipe --profile "$HERE/prof.yaml" --hardware "$hw" --policy "$POL/gpu-auto.yaml" --token-scale 16 \
    -o "$HERE/recipes_measured/${t}_gpu_auto_x16.yaml" --explain > "$HERE/recipes_measured/${t}_gpu_auto_x16.txt"
  $PGQ recipe --profile "$HERE/prof.yaml" --hardware "$hw" --policy "$OUT/mxfp8-all.yaml" --token-scale 16 \
    -o "$OUT/mx.yaml" --explain > "$HERE/recipes_measured/est_${t}_mxfp8_all_x16.txt"
done
