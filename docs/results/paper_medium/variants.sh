#!/usr/bin/env bash
# Which gradient makes F+B (round to nearest everywhere) diverge on medium? Two recipes
# derived from the experiment's: F+B with the logits GEMM's gradients kept in f32, and
# F+B_SR with only the logits GEMM's gradients rounded to nearest.
set -euo pipefail
cd /work/main
E=/tmp/paper/exp
for r in FB_logits_grad_f32 FB_SR_logits_grad_rtn; do
  build/pgq train --model medium --corpus english --init-from $E/baseline/checkpoint.pgqckpt \
    --recipe /tmp/paper/variants/$r.yaml --steps 480 --warmup 80 --lr 0.001 --eval-batches 4 --eval-every 0 \
    --no-progress --out /tmp/paper/variants/$r
done
