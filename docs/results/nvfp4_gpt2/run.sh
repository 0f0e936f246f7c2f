#!/usr/bin/env bash
# Issue 33's experiment on `gpt2-124m` (docs/RESULTS.md, "4-bit training: NVFP4"): the
# steps of ../nvfp4_medium/experiment.sh at GPT-2 small's shape (12 blocks, d 768, tied
# head, 32K vocabulary), sized for 2 cores: batch 2 x 512 tokens, a bf16 base (bf16 runs
# on this CPU's AMX at ~2x f32), NVIDIA's rule as layers 0, 10 and 11 in bf16 (the first
# block and the last 16%). Writes runs to $OUT (default /work/eval33_gpt2), the files the
# table cites beside this script.
HERE=docs/results/nvfp4_gpt2
OUT=${OUT:-/work/eval33_gpt2}
STEPS=${STEPS:-20}
BASE=${BASE:-100}
PROFILE_STEPS=3
LAYERS=12
RULE="layers 0, 10 and 11"
MODEL=(--model gpt2-124m --corpus english --batch 2)
BASE_FLAGS=(--precision bf16 --warmup 20)
PROFILE_FLAGS=(--precision bf16)
. docs/results/nvfp4_medium/experiment.sh
