#!/bin/sh
# Fig. 2 measured (docs/RESULTS.md, "Beyond SQNR"): the backward candidates' orderings
# in four settings (the forward ones too in FP8), then the key points of the `small`
# settings with a second seed.
# Usage: run.sh BUILD_DIR OUT_DIR MEDIUM_BASE
#   MEDIUM_BASE: the 400-step `medium` checkpoint of docs/results/formats_medium/run.sh
#   ($OUT/base/checkpoint.pgqckpt there).
# The `small` baseline is Experiment 1's (`pgq experiment --preset full`, 1000 f32
# steps; only its baseline checkpoint is used). Every run uses one thread, so that two
# experiments can share the 2 cores (the results here ran two at a time); every phase
# resumes. About 4 hours of runs on 2 cores.
set -eu
build=$1
out=$2
medium_base=$3
pgq="$build/pgq"
[ -f "$out/full/baseline/checkpoint.pgqckpt" ] || OMP_NUM_THREADS=2 "$pgq" experiment --preset full --no-profile-metrics --out "$out/full" --no-progress
base="$out/full/baseline/checkpoint.pgqckpt"
export OMP_NUM_THREADS=1
for rounding in sr rtn; do
  "$pgq" experiment --from-checkpoint "$base" --finetune-steps 100 --bits 4 --granularity tensor \
    --backward-rounding "$rounding" --orderings --pareto-steps 25 --threads 1 --no-progress --out "$out/int4_$rounding"
  "$pgq" experiment --from-checkpoint "$base" --finetune-steps 100 --bits 4 --granularity tensor \
    --backward-rounding "$rounding" --orderings --points 0.5 --random-orderings 2 --seed 1235 --threads 1 \
    --no-progress --out "$out/int4_${rounding}_seed1235"
done
"$pgq" experiment --model medium --corpus english --from-checkpoint "$medium_base" --finetune-steps 30 --bits 8 \
  --granularity channel --backward-rounding rtn --orderings --points 0.25,0.5,0.75 --random-orderings 3 --threads 1 \
  --no-progress --out "$out/medium_int8_rtn"
# The key point of `medium` (the 75% cut, where SQNR's cut diverges) with a second seed.
"$pgq" experiment --model medium --corpus english --from-checkpoint "$medium_base" --finetune-steps 30 --bits 8 \
  --granularity channel --backward-rounding rtn --orderings --points 0.75 --random-orderings 3 --seed 1235 \
  --threads 1 --no-progress --out "$out/medium_int8_rtn_seed1235"
# The forward candidates of `small` at 4 bits per tensor (round to nearest).
"$pgq" experiment --from-checkpoint "$base" --finetune-steps 100 --bits 4 --granularity tensor \
  --backward-rounding rtn --orderings --ordering-direction fwd --points 0.5 --random-orderings 5 --pareto-steps 25 \
  --threads 1 --no-progress --out "$out/int4_fwd"
# FP8 (Transformer Engine's HYBRID: e4m3 weights and activations, e5m2 gradients, per
# tensor, round to nearest) on an H100's roofline at 16x the profiled tokens per device
# (batch 128 of 256 tokens): the backward candidates, then the forward ones.
"$pgq" experiment --model medium --corpus english --from-checkpoint "$medium_base" --finetune-steps 30 --scheme fp8 \
  --hardware h100-sxm --token-scale 16 --backward-rounding rtn --orderings --points 0.25,0.5,0.75 --random-orderings 5 \
  --pareto-steps 10 --threads 1 --no-progress --out "$out/medium_fp8_rtn"
"$pgq" experiment --model medium --corpus english --from-checkpoint "$medium_base" --finetune-steps 30 --scheme fp8 \
  --hardware h100-sxm --token-scale 16 --backward-rounding rtn --orderings --ordering-direction fwd --points 0.5 \
  --random-orderings 3 --threads 1 --no-progress --out "$out/medium_fp8_fwd"
