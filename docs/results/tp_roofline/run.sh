#!/usr/bin/env bash
# The tensor-parallel roofline on paper (docs/DISTRIBUTED.md): a LLaMA-2-70B-sized model
# on 64 TPU v5e chips at tensor parallel 1, 8 and 64 (64 sequences of 2048 tokens per
# step in every case), and gpt2-124m at 1, 2 and 4. Usage: run.sh (repository root).
set -euo pipefail
d=docs/results/tp_roofline
for hw in tpu-v5e tpu-v5e-fused; do
  for t in 1 8 64; do
    build/pgq roofline --model $d/llama-64h.yaml --tensor-parallel $t --batch $t --hardware $d/$hw.yaml \
      --precision bf16 > $d/llama-64h_${hw}_tp$t.md
  done
done
for t in 1 2 4; do
  build/pgq roofline --model gpt2-124m --tensor-parallel $t --batch 8 --hardware $d/tpu-v5e.yaml \
    --precision bf16 > $d/gpt2-124m_tpu-v5e_tp$t.md
done
for f in $d/*_tp*.md; do echo "$f: $(grep -E "GEMMs in int8" "$f"); $(grep "step speedup" "$f")"; done
