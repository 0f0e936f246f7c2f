# The body of issue 33's NVFP4 experiment (docs/RESULTS.md, "4-bit training: NVFP4"),
# sourced by nvfp4_medium/run.sh and nvfp4_gpt2/run.sh after they set:
#   HERE OUT STEPS BASE PROFILE_STEPS LAYERS RULE  and the arrays
#   MODEL (model and data flags of every run), BASE_FLAGS (the base run's own),
#   PROFILE_FLAGS (the profiled run's own).
#  1. base: BASE steps with a checkpoint (the model the fine-tunes start from);
#  2. profile: PROFILE_STEPS more steps logged in NVFP4 (with and without the transform),
#     MXFP8 and FP8, with the metrics beyond SQNR (pgq's default backward metric, effect,
#     needs them);
#  3. recipes (b200): every block GEMM in NVFP4 ($HERE/nvfp4_all.yaml); NVIDIA's rule
#     ($HERE/nvidia_rule.yaml: the first block and the last ~16% in bf16); pgq's choice
#     of as many GEMMs per direction as the rule keeps, by the default metric; three
#     random draws of as many; estimates at 16x the tokens (--token-scale); a recipe with
#     every GEMM in NVFP4 (every_gemm.yaml) whose reasons rank every GEMM (ranking.txt);
#  4. fine-tuning STEPS steps from the base at a constant learning rate of 1e-3
#     (--min-lr-ratio 1: a base's cosine ends at 1e-4, where no recipe moves the weights
#     enough to differ), bf16 where a recipe keeps a GEMM, seeds 1234 and 1235, and bf16
#     everywhere as the reference; the table (finetune.md) and the figures.
# Steps already done (a checkpoint, a profile, a fine-tune that reached its last step)
# are not redone; the machine is probed (machine.yaml) only after a run of this
# invocation. 2 threads, under nice.
set -euo pipefail
PGQ=${PGQ:-build/pgq}
MED=docs/results/nvfp4_medium
mkdir -p "$OUT" "$HERE/recipes"
export OMP_NUM_THREADS=2
ran=0
run() { nice -n 19 "$@"; }
if [ ! -f "$OUT/base/checkpoint.pgqckpt" ]; then
  run $PGQ train "${MODEL[@]}" "${BASE_FLAGS[@]}" --steps $BASE --eval-batches 4 --no-progress --out "$OUT/base"
  ran=1
fi
if [ ! -f "$OUT/prof.yaml" ]; then
  run $PGQ train "${MODEL[@]}" "${PROFILE_FLAGS[@]}" --init-from "$OUT/base/checkpoint.pgqckpt" \
    --steps $((BASE + PROFILE_STEPS)) --profile-warmup $BASE --profile-steps $PROFILE_STEPS \
    --profile-formats nvfp4,mxfp8,fp8 --profile-metrics --profile-outputs --profile-out "$OUT/prof.yaml" \
    --eval-batches 4 --no-progress --out "$OUT/prof_run"
  ran=1
fi
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
python3 "$MED/budget_policies.py" "$HERE/recipes/nvfp4_all.yaml" "$HERE/recipes/nvidia_rule.yaml" \
  "$HERE/nvfp4_all.yaml" "$HERE/recipes" > "$HERE/recipes/budget.txt"
for p in pgq_budget random_1 random_2 random_3; do recipe "$p" "$HERE/recipes/${p}_policy.yaml"; done
run $PGQ recipe --profile "$OUT/prof.yaml" --hardware b200 --policy "$HERE/recipes/pgq_budget_policy.yaml" \
  -o "$OUT/pgq_budget_export.yaml" --export-megatron "$HERE/recipes/te_precision.yaml" 2>/dev/null
run $PGQ recipe --profile "$OUT/prof.yaml" --hardware b200 --policy "$MED/every_gemm.yaml" -o "$OUT/every_gemm.yaml" \
  > /dev/null
python3 "$MED/ranking.py" "$OUT/every_gemm.yaml" "$HERE/recipes/nvidia_rule.yaml" "$HERE/recipes/pgq_budget.yaml" \
  $LAYERS "$OUT/prof.yaml" > "$HERE/ranking.txt"
END=$((BASE + STEPS))
for seed in 1234 1235; do
  for r in bf16 nvfp4_all nvidia_rule pgq_budget random_1 random_2 random_3; do
    d="$OUT/ft_${r}_$seed"
    if ! { [ -f "$d/metrics.csv" ] && grep -q "^$END," "$d/metrics.csv"; }; then
      rec=()
      [ "$r" != bf16 ] && rec=(--recipe "$HERE/recipes/$r.yaml")
      run $PGQ train "${MODEL[@]}" --init-from "$OUT/base/checkpoint.pgqckpt" "${rec[@]}" --precision bf16 \
        --seed $seed --steps $END --warmup 10 --lr 0.001 --min-lr-ratio 1 --eval-batches 4 --eval-every 0 \
        --no-progress --out "$d" > "$d.log" 2>&1
      ran=1
    fi
    cp "$d/metrics.csv" "$HERE/ft_${r}_$seed.csv"
  done
done
python3 "$MED/finetune_table.py" "$HERE" $END "$RULE" > "$HERE/finetune.md"
python3 "$MED/figures.py" "$HERE" "$OUT/every_gemm.yaml" $LAYERS
if [ $ran = 1 ]; then run $PGQ hwprobe -o "$HERE/machine.yaml" > /dev/null 2>&1 || true; fi
