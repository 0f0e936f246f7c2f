#!/usr/bin/env bash
# An imported PyTorch model (LLaMA-style, exported with a dynamic batch axis) trains
# data parallel on 2 ranks, 2 x 2 (tensor parallel through examples/sharding/llama.yaml)
# on 4, and tensor parallel with its embedding table and output head split on 2, and
# each equals one process: every step's loss and gradient norm within 1e-4 relative. A
# sharding rule that matches no parameter, or splits a norm gain (which would need the
# whole dim on each device), is refused naming its file and line. An imported model whose
# external weights differ between the machines trains what the first replica's files
# hold, at tensor_parallel 1 and 2.
# Usage: onnx_parallel_test.sh PGQ MPIRUN SOURCE_DIR (ctest sets the mpirun environment)
set -uo pipefail
pgq=$1 mpirun=$2 src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mpi=("$mpirun" --oversubscribe --bind-to none)

/usr/bin/python3 "$src/scripts/export_onnx.py" --arch llama --vocab 256 --d-model 64 --layers 2 --seq 32 \
  --batch 4 --dynamic-batch --out "$tmp/llama" >/dev/null 2>&1 || fail "export"
model=$tmp/llama/model.onnx
rules=$src/examples/sharding/llama.yaml
run=(train --model "$model" --batch 4 --steps 10 --eval-every 5 --no-progress)

"$pgq" "${run[@]}" --out "$tmp/one" >/dev/null 2>&1 || fail "one process"
"${mpi[@]}" -np 2 "$pgq" "${run[@]}" --out "$tmp/dp" >/dev/null 2>&1 || fail "data parallel"
"${mpi[@]}" -np 4 "$pgq" "${run[@]}" --tensor-parallel 2 --sharding-rules "$rules" --out "$tmp/tp" >/dev/null 2>&1 ||
  fail "2 x 2"
# The other kinds of parameter a rule may split: an embedding table along its hidden
# dim, the output head along the vocabulary (vocab-parallel), with the Megatron rules.
{ cat "$rules"; printf '  - {pattern: "embed\\\\.weight", dim: 1}\n  - {pattern: "head\\\\.weight", dim: 0}\n'; } \
  >"$tmp/tables.yaml"
"${mpi[@]}" -np 2 "$pgq" "${run[@]}" --tensor-parallel 2 --sharding-rules "$tmp/tables.yaml" --out "$tmp/tables" \
  >/dev/null 2>&1 || fail "embedding and head split"
for layout in dp tp tables; do
  paste -d, <(cut -d, -f2,3,6 "$tmp/one/metrics.csv") <(cut -d, -f2,3,6 "$tmp/$layout/metrics.csv") | awk -F, -v l=$layout '
    NR == 1 { next }
    { for (i = 1; i <= 3; i++) if ($i != "") { d = $i - $(i + 3); if (d < 0) d = -d; if (d > 1e-4 * $i) bad = 1 } }
    END { if (bad) { print "FAIL: " l " differs from one process"; exit 1 } print "ok: " l " matches one process (" NR - 1 " steps)" }' ||
    exit 1
done

printf 'rules:\n  - {pattern: "blocks\\\\.0\\\\.attn\\\\.q\\\\.weight", dim: 0}\n  - {pattern: "nothing", dim: 0}\n' >"$tmp/bad.yaml"
out=$("${mpi[@]}" -np 2 "$pgq" "${run[@]}" --tensor-parallel 2 --sharding-rules "$tmp/bad.yaml" --out "$tmp/bad" 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "a rule matching nothing: exit $rc: $out"
grep -q "bad.yaml:3: rule 'nothing' matches no trainable parameter" <<<"$out" || fail "no file:line message: $out"
echo "ok: $(grep "matches no" <<<"$out")"

printf 'rules:\n  - {pattern: "blocks\\\\.0\\\\.attn_norm\\\\.weight", dim: 0}\n' >"$tmp/norm.yaml"
out=$("${mpi[@]}" -np 2 "$pgq" "${run[@]}" --tensor-parallel 2 --sharding-rules "$tmp/norm.yaml" --out "$tmp/norm" 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "a rule splitting a norm gain: exit $rc: $out"
grep -q "norm.yaml:2: rule .* splits blocks.0.attn_norm.weight, which mul .* reads: pgq splits only GEMM weights" \
  <<<"$out" || fail "no refusal of the norm split: $out"
echo "ok: a norm gain's split is refused"

# An imported model whose external weights differ on rank 1's machine: rank 0's frozen
# weights and buffers are broadcast like its parameters, so the job trains what rank 0
# alone trains (it trained a mix of the two models in silence).
onnx=$src/tests/data/onnx_modern/llama_variants
for side in a b; do
  mkdir -p "$tmp/$side"
  cp "$onnx/model_dynamic.onnx" "$onnx/dyn.onnx.data" "$tmp/$side/"
done
/usr/bin/python3 -c "import sys, numpy as np
a = np.fromfile(sys.argv[1], dtype=np.float32); (a * 1.5).astype(np.float32).tofile(sys.argv[1])" "$tmp/b/dyn.onnx.data"
onnx_args=(train --model model_dynamic.onnx --batch 2 --seq 16 --frozen 'lm_head.*' --steps 3 --eval-every 0 --no-progress)
"${mpi[@]}" -np 1 -wdir "$tmp/a" "$pgq" "${onnx_args[@]}" --out "$tmp/mixed" : \
  -np 1 -wdir "$tmp/b" "$pgq" "${onnx_args[@]}" --out "$tmp/mixed" >"$tmp/mixed.log" 2>&1 ||
  fail "two ranks with other external data: $(cat "$tmp/mixed.log")"
(cd "$tmp/a" && "$pgq" "${onnx_args[@]}" --out "$tmp/alone" >"$tmp/alone.log" 2>&1) || fail "$(cat "$tmp/alone.log")"
mixed=$(awk -F, 'NR == 4 {printf "%.5f", $2}' "$tmp/mixed/metrics.csv")
alone=$(awk -F, 'NR == 4 {printf "%.5f", $2}' "$tmp/alone/metrics.csv")
[ -n "$mixed" ] && [ "$mixed" = "$alone" ] || fail "step 3's loss: $mixed with rank 1's other weights, $alone alone"
echo "ok: rank 1 with other frozen weights: step 3's loss $mixed, as rank 0's model alone"
# The same at tensor_parallel 2 with a frozen weight that each rank holds a part of: the
# second replica's parts come from the first replica's ranks of the same index (they were
# kept as each rank read them, and the replicas trained two models).
cat >"$tmp/rules.yaml" <<'EOF'
rules:
  - {pattern: 'model\.layers\.[0-9]+\.self_attn\.[qkv]_proj\.weight', dim: 0}
  - {pattern: 'model\.layers\.[0-9]+\.self_attn\.o_proj\.weight', dim: 1}
  - {pattern: 'model\.layers\.[0-9]+\.mlp\.(gate|up)_proj\.weight', dim: 0}
  - {pattern: 'model\.layers\.[0-9]+\.mlp\.down_proj\.weight', dim: 1}
EOF
tp_args=(train --model model_dynamic.onnx --batch 2 --seq 16 --frozen 'model\.layers\.0\.mlp\.gate_proj\.weight'
  --steps 3 --eval-every 0 --no-progress --tensor-parallel 2 --sharding-rules "$tmp/rules.yaml")
"${mpi[@]}" -np 2 -wdir "$tmp/a" "$pgq" "${tp_args[@]}" --out "$tmp/mixed_tp" : \
  -np 2 -wdir "$tmp/b" "$pgq" "${tp_args[@]}" --out "$tmp/mixed_tp" >"$tmp/mixed_tp.log" 2>&1 ||
  fail "two replicas with other external data: $(cat "$tmp/mixed_tp.log")"
"${mpi[@]}" -np 2 -wdir "$tmp/a" "$pgq" "${tp_args[@]}" --out "$tmp/alone_tp" >"$tmp/alone_tp.log" 2>&1 ||
  fail "$(cat "$tmp/alone_tp.log")"
mixed=$(awk -F, 'NR == 4 {printf "%.5f", $2}' "$tmp/mixed_tp/metrics.csv")
alone=$(awk -F, 'NR == 4 {printf "%.5f", $2}' "$tmp/alone_tp/metrics.csv")
[ -n "$mixed" ] && [ "$mixed" = "$alone" ] ||
  fail "step 3's loss at tensor_parallel 2: $mixed with replica 1's other weights, $alone with replica 0's alone"
echo "ok: replica 1 with another frozen part at tensor_parallel 2: step 3's loss $mixed, as replica 0's model alone"
