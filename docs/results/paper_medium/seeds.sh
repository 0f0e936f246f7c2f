#!/usr/bin/env bash
# The two key fine-tuning runs of the paper experiment (and f32) again with a second seed:
# the same baseline checkpoint, another data order and rounding noise.
set -euo pipefail
cd /work/main
E=/tmp/paper/exp
for r in f32 F+B_SR_gt_1016.62 F+B_SR_lt_1046.86 F; do
  rec=()
  [ "$r" != f32 ] && rec=(--recipe "$E/recipes/$r.yaml")
  build/pgq train --model medium --corpus english --init-from $E/baseline/checkpoint.pgqckpt "${rec[@]}" \
    --seed 1235 --steps 480 --warmup 80 --lr 0.001 --eval-batches 4 --eval-every 0 --no-progress \
    --out /tmp/paper/seed2/$r
done
