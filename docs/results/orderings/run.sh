#!/bin/sh
# Fig. 2 measured on `small` (docs/RESULTS.md, "Beyond SQNR"): the backward candidates'
# orderings at 4 bits per tensor, with stochastic rounding and with round to nearest for
# gradients, from the 1000-step baseline of Experiment 1 (`pgq experiment --preset full`),
# then the key points again with a second seed. Usage: run.sh BUILD_DIR OUT_DIR
# (OUT_DIR/full/baseline/checkpoint.pgqckpt is trained first when missing; every phase
# resumes). About 75 minutes on 2 cores.
set -eu
build=$1
out=$2
pgq="$build/pgq"
export OMP_NUM_THREADS=2
[ -f "$out/full/baseline/checkpoint.pgqckpt" ] || {
  # Only the baseline is needed: the experiment stops after it via --finetune-steps 2.
  "$pgq" experiment --preset full --out "$out/full" --no-progress
}
base="$out/full/baseline/checkpoint.pgqckpt"
for rounding in sr rtn; do
  "$pgq" experiment --from-checkpoint "$base" --finetune-steps 100 --bits 4 --granularity tensor \
    --backward-rounding "$rounding" --orderings --pareto-steps 25 --no-progress --out "$out/int4_$rounding"
done
# The key points with a second seed: SQNR, the bias-aware metric, the adversarial
# ordering and two random ones at half the candidates.
for rounding in sr rtn; do
  "$pgq" experiment --from-checkpoint "$base" --finetune-steps 100 --bits 4 --granularity tensor \
    --backward-rounding "$rounding" --orderings --points 0.5 --random-orderings 2 --seed 1235 --no-progress \
    --out "$out/int4_${rounding}_seed1235"
done
