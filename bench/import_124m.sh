#!/usr/bin/env bash
# Import, compile and first training step of a 124M-parameter GPT-2-shaped ONNX export
# (issue 28's "real sizes"): wall time and peak memory (max RSS) of `pgq import` and of
# `pgq train --steps 1`, RUNS times each, and the import's peak above a tiny model's as a
# multiple of the weights' bytes.
#   bench/import_124m.sh PGQ [RUNS] [MODEL_DIR]
# MODEL_DIR (default /tmp/pgq_gpt2_124m) gets the export when it has none: vocab 50257,
# d_model 768, 12 layers, 12 heads, seq 128, batch 2, tied embedding; PyTorch 1.13's
# exporter stores the tied head's transpose as a second initializer (650 MB of file for
# 124M parameters).
set -euo pipefail
pgq=$1 runs=${2:-3} dir=${3:-/tmp/pgq_gpt2_124m}
here=$(cd "$(dirname "$0")/.." && pwd)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
if [ ! -f "$dir/model.onnx" ]; then
  /usr/bin/python3 "$here/scripts/export_onnx.py" --arch gpt2 --vocab 50257 --d-model 768 --layers 12 --heads 12 \
      --seq 128 --batch 2 --out "$dir" > /dev/null
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
values=$("$pgq" import "$dir/model.onnx" | sed -n 's/.*trainable (\([0-9]*\) values).*/\1/p')
weights_mb=$(awk -v v="$values" 'BEGIN {printf "%.1f", v * 4 / 1048576}')
file_mb=$(du -m --apparent-size "$dir/model.onnx" | cut -f1)
# What any import holds besides the model: a tiny model's peak.
/usr/bin/time -f '%M' -o "$work/base" "$pgq" import "$here/tests/data/onnx_modern/gpt2/model.onnx" > /dev/null
base_mb=$(awk '{printf "%.1f", $1 / 1024}' "$work/base")
echo "model: $dir/model.onnx ($file_mb MB), $values trainable values ($weights_mb MB as f32); base RSS $base_mb MB"
for run in $(seq "$runs"); do
  /usr/bin/time -f '%e %M' -o "$work/import" "$pgq" import "$dir/model.onnx" > /dev/null
  read -r import_s import_kb < "$work/import"
  rm -rf "$work/run"
  /usr/bin/time -f '%e %M' -o "$work/train" "$pgq" train --model "$dir/model.onnx" --steps 1 --eval-batches 1 \
      --out "$work/run" --no-progress > "$work/train.out"
  read -r train_s train_kb < "$work/train"
  # A pgq from before the setup line (for a before/after comparison) prints none.
  setup=$(sed -n 's/^setup \([0-9.]*\) s.*/\1/p' "$work/train.out")
  first=$(sed -n 's/.*first step \([0-9]*\) ms.*/\1/p' "$work/train.out")
  setup=${setup:-nan} first=${first:-nan}
  awk -v r="$run" -v is="$import_s" -v ik="$import_kb" -v b="$base_mb" -v w="$weights_mb" -v s="$setup" \
      -v f="$first" -v tk="$train_kb" -v ts="$train_s" 'BEGIN {
    printf "run %d: import %.2f s, peak %.0f MB (%.2fx the weights above the base); train: setup %.1f s + first step %.2f s = %.1f s, peak %.0f MB, whole command %.1f s\n",
      r, is, ik / 1024, (ik / 1024 - b) / w, s, f / 1000, s + f / 1000, tk / 1024, ts }'
done
