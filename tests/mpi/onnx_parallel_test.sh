#!/usr/bin/env bash
# An imported PyTorch model (LLaMA-style, exported with a dynamic batch axis) trains
# data parallel on 2 ranks, 2 x 2 (tensor parallel through examples/sharding/llama.yaml)
# on 4, and tensor parallel with its embedding table and output head split on 2, and
# each equals one process: every step's loss and gradient norm within 1e-4 relative. A
# sharding rule that matches no parameter, or splits a norm gain (which would need the
# whole dim on each device), is refused naming its file and line.
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
