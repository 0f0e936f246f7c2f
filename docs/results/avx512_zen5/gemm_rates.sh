#!/bin/bash
# Where the F+B step's GEMM time goes at GPT-2 124M's exact shape, on this AVX-512 CPU,
# nothing else running, and the optimizer's fused update read from memory:
#   gemm_rates.txt   oneDNN's own timing of every GEMM (ONEDNN_VERBOSE=1) over 3 steps of
#                    `pgq train` with the F+B policy's recipe for machine.yaml, summed per
#                    implementation and shape, ms per step and GOP/s; two runs, to show
#                    how far one GEMM moves between runs of one build. The validation at
#                    the end (1 batch, forward only, f32) is in the f32 rows.
#   update_cold.txt  elementwise_bench AdamWQuantizeCold: a GPT-2 MLP weight [768, 3072]
#                    from memory (eight in turn), the update alone, then the graph's
#                    quantizations, fused, and the fused kernel's two quantizations alone
#   bash docs/results/avx512_zen5/gemm_rates.sh   (~3 min)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=$root/build
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$here"
gpt2=$root/bench/gpt2_124m_exact.yaml
steps=3
"$build/pgq" train --model "$gpt2" --steps 3 --profile-warmup 1 --profile-steps 2 --profile-out "$work/gpt2.yaml" \
  --no-progress --out "$work/profile" >/dev/null 2>&1
"$build/pgq" recipe --profile "$work/gpt2.yaml" --hardware machine.yaml --policy F+B -o "$work/fb.yaml" >/dev/null 2>&1
{
  echo "# $(git -C "$root" rev-parse --short HEAD), ONEDNN_VERBOSE=1 pgq train --model bench/gpt2_124m_exact.yaml --steps $steps --eval-batches 1 --recipe <F+B recipe for machine.yaml>"
  for run in 1 2; do
    echo "## run $run: ms/step  calls/step  GOP/s  implementation  type  A/B layouts  shape"
    ONEDNN_VERBOSE=1 "$build/pgq" train --model "$gpt2" --steps $steps --eval-batches 1 --recipe "$work/fb.yaml" \
      --no-progress --out "$work/run$run" 2>&1 | awk -F, -v steps=$steps '
      $1 == "onednn_verbose" && $2 == "exec" {
        split($7, md, " "); type = (md[1] ~ /u8/) ? "int8" : (md[1] ~ /bf16/) ? "bf16" : "f32"
        n1 = split(md[1], a, ":"); n2 = split(md[2], b, ":"); layout = a[n1 - 1] "/" b[n2 - 1]
        split($10, dims, ":"); na = split(dims[1], da, "x"); nb = split(dims[2], db, "x")
        batch = (na == 3) ? da[1] : 1; m = da[na - 1]; k = da[na]; n = db[nb]
        key = $5 " " type " " layout " " $10
        ms[key] += $11; calls[key]++; ops[key] += 2 * batch * m * n * k; total += $11
      }
      END {
        for (key in ms) printf "%8.2f %6.1f %6.0f  %s\n", ms[key] / steps, calls[key] / steps, ops[key] / ms[key] / 1e6, key | "sort -rn"
        close("sort -rn")
        printf "total %.1f ms per step\n", total / steps
      }'
  done
} >gemm_rates.txt
{
  echo "# build/bench/elementwise_bench --benchmark_filter=AdamWQuantizeCold/2/ --benchmark_min_time=1 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true ($(git -C "$root" rev-parse --short HEAD))"
  "$build/bench/elementwise_bench" --benchmark_filter=AdamWQuantizeCold/2/ --benchmark_min_time=1 --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true 2>&1 | grep -E '_median'
} >update_cold.txt
