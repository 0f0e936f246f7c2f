#!/usr/bin/env bash
# Issue 16's evaluation on `medium` (docs/RESULTS.md, "Formats beyond int8"). Run from the
# repository root after building; writes to $OUT (default /work/eval16). 2 threads.
#  1. baseline: 400 f32 steps (as the paper experiment), with a checkpoint;
#  2. profile: 10 more steps logged in int8, FP8 (E4M3, E5M2 gradients), MXFP8, MXINT8
#     and MOSS two-level formats (with the scaling-strategy record);
#  3. recipes for h100-sxm and b200 from the shipped policies, at the profiled shapes
#     and at 16x the tokens per device (--token-scale);
#  4. fine-tuning 80 steps from the baseline in bf16, with the FP8 delayed-scaling
#     recipe, the FP8 predicted-weight-scale recipe and the MXFP8 recipe (all GEMMs
#     the policy's SQNR thresholds allow, whatever the roofline: min_speedup 0), bf16
#     for every GEMM the recipe keeps.
set -euo pipefail
PGQ=${PGQ:-build/pgq}
OUT=${OUT:-/work/eval16}
POL=recipes/policies
HERE=docs/results/formats_medium
mkdir -p "$OUT"
export OMP_NUM_THREADS=2
FORMATS=fp8,fp8_e4m3,mxfp8,mxint8,moss_fp8
[ -f "$OUT/base/checkpoint.pgqckpt" ] ||
  $PGQ train --model medium --corpus english --steps 400 --eval-batches 4 --no-progress --out "$OUT/base"
[ -f "$OUT/prof.yaml" ] ||
  $PGQ train --model medium --corpus english --init-from "$OUT/base/checkpoint.pgqckpt" --steps 410 \
    --profile-warmup 400 --profile-steps 10 --profile-formats $FORMATS --profile-out "$OUT/prof.yaml" --eval-batches 4 --no-progress \
    --out "$OUT/prof_run"
$PGQ sqnr-table "$OUT/prof.yaml" --compare int8,fp8,mxfp8,moss_fp8,mxint8 --top 15 > "$HERE/compare.md"
$PGQ sqnr-table "$OUT/prof.yaml" --compare int8,fp8,mxfp8,moss_fp8,mxint8 --csv > "$HERE/compare.csv"
$PGQ sqnr-table "$OUT/prof.yaml" --scaling > "$HERE/scaling.md"
cp "$OUT/prof.yaml" "$OUT/prof.csv" "$HERE/"
mkdir -p "$HERE/recipes"
for p in fp8-delayed fp8-predicted mxfp8 gpu-auto; do
  sed 's/^min_speedup: .*/min_speedup: 0/; s/^name: \(.*\)/name: \1-all/' "$POL/$p.yaml" > "$OUT/$p-all.yaml"
done
# As a GPU user would ask: the shipped policies, roofline included, at 16x the tokens.
$PGQ recipe --profile "$OUT/prof.yaml" --hardware h100-sxm --policy $POL/fp8-delayed.yaml --token-scale 16 \
  -o "$HERE/recipes/h100_fp8_delayed_x16.yaml" --explain > "$HERE/recipes/h100_fp8_delayed_x16.txt"
$PGQ recipe --profile "$OUT/prof.yaml" --hardware b200 --policy $POL/gpu-auto.yaml --token-scale 16 \
  -o "$HERE/recipes/b200_gpu_auto_x16.yaml" --explain > "$HERE/recipes/b200_gpu_auto_x16.txt"
$PGQ recipe --profile "$OUT/prof.yaml" --hardware h100-sxm --policy $POL/gpu-auto.yaml \
  -o "$HERE/recipes/h100_gpu_auto.yaml" --explain > "$HERE/recipes/h100_gpu_auto.txt"
# The fine-tuning recipes: every GEMM the SQNR thresholds allow.
$PGQ recipe --profile "$OUT/prof.yaml" --hardware h100-sxm --policy "$OUT/fp8-delayed-all.yaml" \
  -o "$HERE/recipes/fp8_delayed.yaml" --explain > "$HERE/recipes/fp8_delayed.txt"
$PGQ recipe --profile "$OUT/prof.yaml" --hardware h100-sxm --policy "$OUT/fp8-predicted-all.yaml" \
  -o "$HERE/recipes/fp8_predicted.yaml" --explain > "$HERE/recipes/fp8_predicted.txt"
$PGQ recipe --profile "$OUT/prof.yaml" --hardware b200 --policy "$OUT/mxfp8-all.yaml" \
  -o "$HERE/recipes/mxfp8.yaml" --explain > "$HERE/recipes/mxfp8.txt"
for x in 1 16; do
  for pair in "h100-sxm fp8_delayed" "h100-sxm fp8_predicted" "b200 mxfp8" "b200 fp8_delayed"; do
    set -- $pair
    $PGQ recipe --profile "$OUT/prof.yaml" --hardware $1 --policy "$OUT/${2//_/-}-all.yaml" --token-scale $x \
      -o "$OUT/est_$1_$2_x$x.yaml" --explain > "$HERE/recipes/est_$1_$2_x$x.txt"
  done
done
# MXFP8 with a backward threshold of 100: which GEMMs fall below it.
sed 's/threshold: 1,/threshold: 100,/; s/^min_speedup: .*/min_speedup: 0/; s/^name: .*/name: mxfp8-bwd100/' \
  $POL/mxfp8.yaml > "$HERE/recipes/mxfp8_bwd100_policy.yaml"
$PGQ recipe --profile "$OUT/prof.yaml" --hardware b200 --policy "$HERE/recipes/mxfp8_bwd100_policy.yaml" \
  -o "$HERE/recipes/mxfp8_bwd100.yaml" --explain > "$HERE/recipes/mxfp8_bwd100.txt"
python3 $HERE/spikes.py "$OUT/prof.csv" "$HERE/recipes/fp8_delayed.yaml" "$HERE/recipes/mxfp8.yaml" \
  "$HERE/recipes/h100_fp8_delayed_x16.yaml" > "$HERE/spikes.md"
for seed in 1234 1235; do
  for r in bf16 fp8_delayed fp8_predicted mxfp8 mxfp8_bwd100; do
    d="$OUT/ft_${r}_$seed"
    [ -f "$d/metrics.csv" ] && continue
    rec=()
    [ "$r" != bf16 ] && rec=(--recipe "$HERE/recipes/$r.yaml")
    $PGQ train --model medium --corpus english --init-from "$OUT/base/checkpoint.pgqckpt" "${rec[@]}" \
      --precision bf16 --seed $seed --steps 480 --warmup 80 --lr 0.001 --eval-batches 4 --eval-every 0 \
      --no-progress --out "$d" > "$d.log" 2>&1
  done
done
python3 $HERE/finetune_table.py "$OUT" > "$HERE/finetune.md"
