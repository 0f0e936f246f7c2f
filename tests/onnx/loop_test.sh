#!/usr/bin/env bash
# The whole PGQ loop on an imported LLaMA-style model (RMSNorm, rotary embeddings,
# grouped-query attention, SwiGLU) exported by PyTorch: an f32 run that profiles,
# `pgq recipe` whose explanation speaks the model's module paths, 100 steps of int8
# training from the f32 checkpoint whose loss goes down, and `pgq experiment` on it.
#   loop_test.sh PGQ SOURCE_DIR WORK_DIR
set -euo pipefail
pgq=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1

/usr/bin/python3 "$src/scripts/export_onnx.py" --arch llama --vocab 256 --d-model 128 --layers 2 --seq 64 \
    --batch 8 --out "$work/llama" > /dev/null
model=$work/llama/model.onnx

# --frozen matches module parameter names, also of weights constant folding renamed:
# block 0's nine parameters (q, k, v, o, gate, up, down, two norms) of 21 stop training.
"$pgq" import "$model" --frozen 'blocks\.0\..*' | tee "$work/frozen.txt" | grep -q 'parameters: 12 trainable' ||
  { echo "FAIL: --frozen"; cat "$work/frozen.txt"; exit 1; }

"$pgq" train --model "$model" --steps 150 --profile-warmup 140 --profile-steps 5 \
    --profile-out "$work/profile.yaml" --out "$work/base" --no-progress --eval-every 0
"$pgq" recipe --profile "$work/profile.yaml" --hardware epyc-zen3-2c --policy 'F+B_SR>100' \
    --model "$model" -o "$work/recipe.yaml" --explain | tee "$work/explain.txt"
grep -q 'blocks\.[01]/' "$work/explain.txt" || { echo "FAIL: the explanation has no module-path labels"; exit 1; }
grep -q 'blocks\.0/attn/q' "$work/recipe.yaml" || { echo "FAIL: the recipe has no module-path labels"; exit 1; }
grep -Eq 'forward GEMMs: +[1-9][0-9]* of' "$work/explain.txt" || { echo "FAIL: no forward GEMM in int8"; exit 1; }
grep -Eq 'backward GEMMs: +[1-9][0-9]* of' "$work/explain.txt" || { echo "FAIL: no backward GEMM in int8"; exit 1; }

"$pgq" train --model "$model" --steps 250 --init-from "$work/base/checkpoint.pgqckpt" --recipe "$work/recipe.yaml" \
    --out "$work/int8" --no-progress --eval-every 0
# Mean training loss of the first and last 20 int8 steps.
awk -F, 'NR > 1 { loss[n++] = $2 }
  END {
    for (i = 0; i < 20; i++) { first += loss[i]; last += loss[n - 1 - i] }
    printf "int8 steps: %d, mean loss of the first 20 %.4f, of the last 20 %.4f\n", n, first / 20, last / 20
    if (n != 100) { print "FAIL: expected 100 int8 steps"; exit 1 }
    if (!(last < first)) { print "FAIL: the loss did not go down"; exit 1 }
  }' "$work/int8/metrics.csv"
grep -q 'F+B_SR>100' "$work/int8/metrics.csv" || { echo "FAIL: the int8 run did not use the recipe"; exit 1; }

"$pgq" experiment --model "$model" --baseline-steps 30 --finetune-steps 4 --fractions 0.5 --out "$work/experiment" \
    --no-progress > /dev/null
grep -q "imported from \`$model\`" "$work/experiment/REPORT.md" || { echo "FAIL: no report of the imported model"; exit 1; }
grep -q '| F+B_SR |' "$work/experiment/REPORT.md" || { echo "FAIL: the report has no Table I"; exit 1; }
# A checkpoint remembers the model file's hash: --resume refuses the same path holding
# another model.
mkdir -p "$work/changed"
cp "$model" "$model.params.txt" "$work/changed/"
"$pgq" train --model "$work/changed/model.onnx" --steps 4 --stop-after 2 --out "$work/changed/run" --no-progress \
    > /dev/null
/usr/bin/python3 "$src/scripts/export_onnx.py" --arch llama --vocab 256 --d-model 64 --layers 2 --seq 64 \
    --batch 8 --out "$work/other" > /dev/null
cp "$work/other/model.onnx" "$work/other/model.onnx.params.txt" "$work/changed/"
status=0
"$pgq" train --model "$work/changed/model.onnx" --steps 4 --resume --out "$work/changed/run" --no-progress \
    2> "$work/changed/err.txt" || status=$?
[ "$status" = 2 ] && grep -q "another model config.*onnx_hash is" "$work/changed/err.txt" ||
  { echo "FAIL: --resume with a changed model file: exit $status, $(cat "$work/changed/err.txt")"; exit 1; }
echo "loop on an imported LLaMA: ok"
