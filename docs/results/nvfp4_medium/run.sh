#!/usr/bin/env bash
# Issue 33's experiment on `medium` (docs/RESULTS.md, "4-bit training: NVFP4"); the
# steps are experiment.sh's. Run from the repository root after building; writes runs to
# $OUT (default /work/eval33), the files the table cites beside this script.
# medium: 100 f32 steps of base; 5 profiled steps (~156 s each with every metric's
# statistics in four formats); fine-tunes of 30 steps, ~4.8 s per emulated-NVFP4 step and
# ~1.4 s per bf16 step (AMX) on 2 vCPUs of an Intel Xeon: about 70 minutes in all.
HERE=docs/results/nvfp4_medium
OUT=${OUT:-/work/eval33}
STEPS=${STEPS:-30}
BASE=${BASE:-100}
PROFILE_STEPS=5
LAYERS=8
RULE="layers 0 and 7"
MODEL=(--model medium --corpus english)
BASE_FLAGS=()
PROFILE_FLAGS=()
. "$HERE/experiment.sh"
