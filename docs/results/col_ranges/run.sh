#!/bin/bash
# Per-column scales (kernels/quantize.cc groupRanges) read in chunks of 2048 columns down
# whole blocks of rows, cut into row slabs only where there are too few chunks to share,
# against the chunks of 128 columns before, on this machine, 2 threads unless said,
# nothing else running:
#   kernels.txt    quant_bench params, dynamic and grad4 on a weight [1024,1024] and a
#                  weight gradient's operand [2048,8192] (per-column scales), 1 and 2
#                  threads, 5 rounds base and new in turn
#   per_op.txt     pgq train --profile-ops: quant_params and quantize of medium's F+B
#                  steps (the recipe of avx2_zen3/, FB_medium.yaml) and quant_stats of its
#                  profiled steps, 3 rounds base and new in turn
#   steps.txt      train_step_bench: medium's f32, F+B and profiled steps, medians of 3
#                  repetitions in random order, with the GEMM shares; base, then new
#   identical.txt  medium's F+B checkpoint after 3 steps and small's profile (timings left
#                  out) from both builds
# Not made here (their commands are in their first lines): per_op_fb.txt (3 more rounds of
# the F+B steps alone) and perf_smoke_ab.txt (the perf smoke without its steps, in turn);
# qmatmul_split.txt by qmatmul_split.sh.
# BASE: a Release build of the commit before the change (f188e07, which has quant_bench's
# [2048,8192] view); new: this build:
#   BASE=/path/to/base/build bash docs/results/col_ranges/run.sh     (~25 min)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../ab_common.sh"
cd "$here"
recipe=$root/docs/results/avx2_zen3/FB_medium.yaml

{
  echo "# $cpu"
  echo "# quant_bench --benchmark_filter='(weight1024x1024|wgrad2048x8192)/(params|dynamic|grad4)/' --benchmark_min_time=0.3, GB/s per thread"
  for round in 1 2 3 4 5; do
    for side in base new; do
      "$(dir_of $side)/bench/quant_bench" --benchmark_min_time=0.3 \
        --benchmark_filter='(weight1024x1024|wgrad2048x8192)/(params|dynamic|grad4)/' 2>/dev/null |
        awk -v s=$side -v r=$round '/^GB\/s per thread/{t=1} /^Emulated/{t=0} /^A gradient/{t=3} !/threads:/{next}
          t==1{print "round", r, s, $1, $2, "params", $3, "dynamic", $6} t==3{print "round", r, s, $1, $2, "grad4", $3}'
    done
  done
} >kernels.txt

{
  echo "# $cpu"
  echo "# ms per step; F+B: pgq train --model medium --steps 4 --profile-ops --recipe avx2_zen3/FB_medium.yaml"
  echo "# profiled: pgq train --model medium --steps 4 --profile-steps 2 --profile-warmup 2 --profile-ops"
  for round in 1 2 3; do
    for side in base new; do
      "$(dir_of $side)/pgq" train --model medium --steps 4 --profile-ops --recipe "$recipe" --no-progress \
        --out "$work/fb_$side$round" 2>&1 | sed -n '/^per-op time split/,/^$/p' |
        awk -v s=$side -v r=$round '/kernel time/{sub(/.*\(/, "("); kt=$0} /^  quantize /{q=$2} /quant_params/{p=$2}
          END{printf "round %s %-4s F+B      quant_params %7s  quantize %7s  %s\n", r, s, p, q, kt}'
      "$(dir_of $side)/pgq" train --model medium --steps 4 --profile-steps 2 --profile-warmup 2 --profile-ops \
        --profile-out "$work/p_$side.yaml" --no-progress --out "$work/p_$side$round" 2>&1 |
        sed -n '/^per-op time split of the profiled/,/^$/p' |
        awk -v s=$side -v r=$round '/kernel time/{sub(/.*\(/, "("); kt=$0} /quant_stats/{q=$2}
          END{printf "round %s %-4s profiled quant_stats %7s  %s\n", r, s, q, kt}'
    done
  done
} >per_op.txt

{
  echo "# both builds, the same commands"
  for side in base new; do
    "$(dir_of $side)/pgq" train --model medium --steps 3 --recipe "$recipe" --no-progress --out "$work/id_$side" >/dev/null 2>&1
    "$(dir_of $side)/pgq" train --model small --steps 4 --profile-steps 2 --profile-warmup 2 \
      --profile-out "$work/id_$side.yaml" --no-progress --out "$work/idp_$side" >/dev/null 2>&1
  done
  echo "## pgq train --model medium --steps 3 --recipe avx2_zen3/FB_medium.yaml: the checkpoints"
  for f in $(cd "$work/id_new" && ls); do
    if [ -f "$work/id_new/$f" ] && [[ "$f" == *.pgqckpt ]]; then
      if cmp -s "$work/id_base/$f" "$work/id_new/$f"; then echo "$f: equal ($(stat -c %s "$work/id_new/$f") bytes)"; else echo "$f: DIFFERENT"; fi
    fi
  done
  echo "## pgq train --model small --steps 4 --profile-steps 2 --profile-warmup 2: the profiles, lines with _ms left out"
  profiles_equal "$work/id_base.yaml" "$work/id_new.yaml"
} >identical.txt


steps_ab '(f32Step/medium|quantizedStep/medium_FB|profiledStep/medium)/threads:2' >steps.txt
