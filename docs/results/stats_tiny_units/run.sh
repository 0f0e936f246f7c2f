#!/bin/bash
# Units of the statistics pass whose absmax is below 2^-40 are summed again in double
# (kernels/stats_sink.h needsWideSums, fad7036) against the build before (b454261), in
# turn, on this machine, nothing else running:
#   identical.txt  the profiles of small from both builds, timings left out: the int8/int7
#                  defaults, and 12 schemes and formats with --profile-metrics --profile-outputs
#   kernels.txt    quant_bench, 1 thread, 3 rounds, base and new in turn: the single-format
#                  statistics (int8 rtn/sr, e4m3, mxfp8) and a gradient's four formats (grad4)
#   per_op.txt     pgq train --profile-ops: quant_stats per profiled step of small, 3 rounds
# BASE: a Release build of b454261 (pgq_cli and quant_bench):
#   BASE=/path/to/base/build bash docs/results/stats_tiny_units/run.sh     (~8 min)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
new=$(cd "$here/../../.." && pwd)/build
base=${BASE:?set BASE to the base build directory}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$here"
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), flags: $(grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512_vnni|avx512_bf16|amx_tile)$' | tr '\n' ' ')"
export OMP_NUM_THREADS=2
dir_of() { if [ "$1" = base ]; then echo "$base"; else echo "$new"; fi; }

{
  echo "# $cpu"
  echo "# the profiles of small from both builds, lines with timings (_ms) left out"
  formats="int8,fp8,mxfp8,nvfp4,mxfp4,bf16,mxint8,moss_fp8,e4m3:channel:rtn,e5m2:tensor:sr,int4:block32:sr:asym,e2m1:block16:sr:scale=e4m3"
  for flags in "" "--profile-formats $formats --profile-metrics --profile-outputs"; do
    for side in base new; do
      "$(dir_of $side)/pgq" train --model small --steps 4 --profile-steps 2 --profile-warmup 2 $flags \
        --profile-out "$work/id_$side.yaml" --no-progress --out "$work/id_$side$RANDOM" >/dev/null 2>&1
    done
    echo "## pgq train --model small --steps 4 --profile-steps 2 --profile-warmup 2 $flags"
    if diff <(grep -v '_ms' "$work/id_base.yaml") <(grep -v '_ms' "$work/id_new.yaml") >/dev/null; then
      echo "equal: $(grep -vc '_ms' "$work/id_new.yaml") lines"
    else
      echo "DIFFERENT"
      diff <(grep -v '_ms' "$work/id_base.yaml") <(grep -v '_ms' "$work/id_new.yaml") | head -20
    fi
  done
} >identical.txt

{
  echo "# $cpu"
  echo "# quant_bench --benchmark_min_time=0.5, 1 thread, GB/s per thread"
  for round in 1 2 3; do
    for side in base new; do
      echo "## round $round: $side"
      OMP_NUM_THREADS=1 "$(dir_of $side)/bench/quant_bench" --benchmark_min_time=0.5 \
        --benchmark_filter='(act2048x1024|weight1024x1024)/(stats_rtn|stats_sr|stats_e4m3|stats_mxfp8|grad4)/threads:1' \
        2>/dev/null | awk '/^GB\/s per thread/{t=1} /^Emulated/{t=2} /^A gradient/{t=3} !/threads:1/{next}
          t==1{print $1, "stats_rtn", $7, "stats_sr", $8} t==2{print $1, "stats_e4m3", $6, "stats_mxfp8", $7}
          t==3{print $1, "grad4", $3}'
    done
  done
} >kernels.txt

{
  echo "# $cpu"
  echo "# pgq train --model small --steps 6 --profile-steps 4 --profile-warmup 2 --profile-ops: the profiled steps' quant_stats line"
  for round in 1 2 3; do
    for side in base new; do
      "$(dir_of $side)/pgq" train --model small --steps 6 --profile-steps 4 --profile-warmup 2 \
        --profile-out "$work/$side.yaml" --profile-ops --no-progress --out "$work/run_${side}_$round" 2>&1 |
        sed -n '/^per-op time split of the profiled/,/^$/p' |
        awk -v s="$side" -v r="$round" '/kernel time/{sub(/.*\(/, "("); kt=$0} /quant_stats/{printf "round %s %-4s quant_stats %s ms/step  %s\n", r, s, $2, kt}'
    done
  done
} >per_op.txt
