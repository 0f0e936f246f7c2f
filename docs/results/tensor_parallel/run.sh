#!/usr/bin/env bash
# Tensor parallel 2 vs 1 with the same F+B_SR recipe on `small` (docs/DISTRIBUTED.md):
# two seeds per layout, 300 steps each; metrics.csv of each run lands in OUT/<layout>_s<seed>/.
# Usage: run.sh OUT (from the repository root, after scripts/setup.sh)
set -euo pipefail
out=${1:?usage: run.sh OUT}
mkdir -p "$out"
pgq=build/pgq
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# The recipe: profiled in one process, F+B_SR for this CPU's hardware model.
OMP_NUM_THREADS=2 $pgq train --model small --steps 20 --profile-warmup 10 --profile-steps 5 \
  --profile-out "$out/profile.yaml" --out "$out/profile_run" --no-progress
$pgq recipe --profile "$out/profile.yaml" --hardware epyc-zen3-2c --policy F+B_SR -o "$out/fbsr.yaml" --explain
for seed in 1 2; do
  OMP_NUM_THREADS=2 $pgq train --model small --steps 300 --eval-every 100 --seed $seed --recipe "$out/fbsr.yaml" \
    --out "$out/tp1_s$seed" --no-progress
  OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 2 $pgq train --model small --tensor-parallel 2 \
    --steps 300 --eval-every 100 --seed $seed --recipe "$out/fbsr.yaml" --out "$out/tp2_s$seed" --no-progress
done
