#!/usr/bin/env bash
# Issue 33's experiment on `medium` (docs/RESULTS.md, "4-bit training: NVFP4"). Run from
# the repository root after building; writes runs to $OUT (default /work/eval33), the
# files the table cites beside this script. 2 threads, under nice. Sized so that the
# whole script runs in about 90 minutes on 2 cores (medium: ~4.7 s per f32 step there).
#  1. base: 100 f32 steps with a checkpoint (the model the fine-tunes start from);
#  2. profile: 5 more steps logged in NVFP4 (with and without the transform), MXFP8, FP8,
#     with the metrics beyond SQNR (pgq's default backward metric, effect, needs them);
#  3. recipes (b200): every block GEMM in NVFP4; NVIDIA's rule (layers 0 and 7 in bf16);
#     pgq's choice of as many GEMMs per direction as the rule keeps, by the default
#     metric; three random draws of as many; estimates at 16x the tokens (--token-scale);
#  4. fine-tuning 30 steps from the base at a constant learning rate of 1e-3
#     (--min-lr-ratio 1: the base's cosine has decayed to 1e-4, where no recipe would move
#     the weights enough to differ), bf16 where a recipe keeps a GEMM, seeds 1234 and
#     1235, and bf16 everywhere as the reference. About 65 minutes on 2 cores (a step in
#     emulated NVFP4 takes ~10 s there, in bf16 ~5 s).
set -euo pipefail
PGQ=${PGQ:-build/pgq}
OUT=${OUT:-/work/eval33}
HERE=docs/results/nvfp4_medium
STEPS=${STEPS:-30}
BASE=${BASE:-100}
mkdir -p "$OUT" "$HERE/recipes"
export OMP_NUM_THREADS=2
run() { nice -n 19 "$@"; }
[ -f "$OUT/base/checkpoint.pgqckpt" ] ||
  run $PGQ train --model medium --corpus english --steps $BASE --eval-batches 4 --no-progress --out "$OUT/base"
[ -f "$OUT/prof.yaml" ] ||
  run $PGQ train --model medium --corpus english --init-from "$OUT/base/checkpoint.pgqckpt" --steps $((BASE + 5)) \
    --profile-warmup $BASE --profile-steps 5 --profile-formats nvfp4,mxfp8,fp8 --profile-metrics --profile-outputs \
    --profile-out "$OUT/prof.yaml" --eval-batches 4 --no-progress --out "$OUT/prof_run"
cp "$OUT/prof.yaml" "$OUT/prof.csv" "$HERE/"
cp "$OUT/base/metrics.csv" "$HERE/base_metrics.csv"
cp "$OUT/prof_run/metrics.csv" "$HERE/prof_metrics.csv"
run $PGQ sqnr-table "$OUT/prof.yaml" --compare int8,fp8,mxfp8,nvfp4 --top 15 > "$HERE/compare.md"
recipe() {  # name policy
  run $PGQ recipe --profile "$OUT/prof.yaml" --hardware b200 --policy "$2" -o "$HERE/recipes/$1.yaml" --explain \
    > "$HERE/recipes/$1.txt"
  run $PGQ recipe --profile "$OUT/prof.yaml" --hardware b200 --policy "$2" --token-scale 16 -o "$OUT/$1_x16.yaml" \
    --explain > "$HERE/recipes/$1_x16.txt"
}
recipe nvfp4_all "$HERE/nvfp4_all.yaml"
recipe nvidia_rule "$HERE/nvidia_rule.yaml"
python3 "$HERE/budget_policies.py" "$HERE/recipes/nvfp4_all.yaml" "$HERE/recipes/nvidia_rule.yaml" \
  "$HERE/nvfp4_all.yaml" "$HERE/recipes" > "$HERE/recipes/budget.txt"
for p in pgq_budget random_1 random_2 random_3; do recipe "$p" "$HERE/recipes/${p}_policy.yaml"; done
run $PGQ recipe --profile "$OUT/prof.yaml" --hardware b200 --policy "$HERE/recipes/pgq_budget_policy.yaml" \
  -o "$OUT/pgq_budget_export.yaml" --export-megatron "$HERE/recipes/te_precision.yaml" 2>/dev/null
run $PGQ recipe --profile "$OUT/prof.yaml" --hardware b200 --policy "$HERE/every_gemm.yaml" -o "$OUT/every_gemm.yaml" \
  > /dev/null
python3 "$HERE/ranking.py" "$OUT/every_gemm.yaml" "$HERE/recipes/nvidia_rule.yaml" "$HERE/recipes/pgq_budget.yaml" 8 "$OUT/prof.yaml" \
  > "$HERE/ranking.txt"
END=$((BASE + STEPS))
for seed in 1234 1235; do
  for r in bf16 nvfp4_all nvidia_rule pgq_budget random_1 random_2 random_3; do
    d="$OUT/ft_${r}_$seed"
    [ -f "$d/metrics.csv" ] && grep -q "^$END," "$d/metrics.csv" && continue
    rec=()
    [ "$r" != bf16 ] && rec=(--recipe "$HERE/recipes/$r.yaml")
    run $PGQ train --model medium --corpus english --init-from "$OUT/base/checkpoint.pgqckpt" "${rec[@]}" \
      --precision bf16 --seed $seed --steps $END --warmup 10 --lr 0.001 --min-lr-ratio 1 --eval-batches 4 --eval-every 0 \
      --no-progress --out "$d" > "$d.log" 2>&1
    cp "$d/metrics.csv" "$HERE/ft_${r}_$seed.csv"
  done
done
python3 "$HERE/finetune_table.py" "$HERE" $END > "$HERE/finetune.md"
python3 "$HERE/figures.py" "$HERE" "$OUT/every_gemm.yaml" 8
run $PGQ hwprobe -o "$HERE/machine.yaml" > /dev/null 2>&1 || true
