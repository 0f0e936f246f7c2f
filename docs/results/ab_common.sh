# Sourced by the results scripts that time a base build against this one, in turn, after
# they set `here` (their folder): root, new (this build), base ($BASE), a scratch folder
# `work` removed on exit, the CPU line `cpu`, dir_of base|new, OMP_NUM_THREADS=2, and
# steps_ab FILTER: train_step_bench's medians and coefficients of variation, base, then new.
root=$(cd "$here/../../.." && pwd)
new=$root/build
base=${BASE:?set BASE to the base build directory}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), flags: $(grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512_vnni|avx512_bf16|amx_tile)$' | tr '\n' ' ')"
export OMP_NUM_THREADS=2
dir_of() { if [ "$1" = base ]; then echo "$base"; else echo "$new"; fi; }
steps_ab() {
  local flags=(--benchmark_filter="$1" --benchmark_min_time=2 --benchmark_repetitions=3
               --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true)
  echo "# $cpu"
  echo "# train_step_bench ${flags[*]}; base, then new"
  for side in base new; do
    echo "## $side"
    "$(dir_of $side)/bench/train_step_bench" "${flags[@]}" 2>&1 | grep -E '_median|_cv'
  done
}
# profiles_equal A B: whether two profiles are equal line for line, timings (_ms) left out.
profiles_equal() {
  if diff <(grep -v '_ms' "$1") <(grep -v '_ms' "$2") >/dev/null; then
    echo "equal: $(grep -vc '_ms' "$2") lines"
  else
    echo "DIFFERENT"
    diff <(grep -v '_ms' "$1") <(grep -v '_ms' "$2") | head -20
  fi
}
# identical_ab: the profiles of small from both builds, equal line for line (timings left
# out), with the int8/int7 defaults and with 12 schemes and formats, the metrics' and the
# outputs' statistics.
identical_ab() {
  local formats="int8,fp8,mxfp8,nvfp4,mxfp4,bf16,mxint8,moss_fp8,e4m3:channel:rtn,e5m2:tensor:sr,int4:block32:sr:asym,e2m1:block16:sr:scale=e4m3"
  echo "# $cpu"
  echo "# the profiles of small from both builds, lines with timings (_ms) left out"
  for flags in "" "--profile-formats $formats --profile-metrics --profile-outputs"; do
    for side in base new; do
      "$(dir_of $side)/pgq" train --model small --steps 4 --profile-steps 2 --profile-warmup 2 $flags \
        --profile-out "$work/id_$side.yaml" --no-progress --out "$work/id_$side$RANDOM" >/dev/null 2>&1
    done
    echo "## pgq train --model small --steps 4 --profile-steps 2 --profile-warmup 2 $flags"
    profiles_equal "$work/id_base.yaml" "$work/id_new.yaml"
  done
}
# stats_kernels_ab: quant_bench's statistics kernels, 1 thread, 3 rounds, base and new in
# turn: the single-format statistics (int8 rtn/sr, e4m3, mxfp8) and a gradient's four
# formats (grad4), GB/s per thread.
stats_kernels_ab() {
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
}
# quant_stats_ab "MODEL STEPS PROFILED ROUNDS"...: pgq train --profile-ops, the profiled
# steps' quant_stats line, base and new in turn.
quant_stats_ab() {
  echo "# $cpu"
  echo "# pgq train --model M --steps S --profile-steps P --profile-warmup 2 --profile-ops: the profiled steps' quant_stats line"
  local spec model steps profiled rounds round side
  for spec in "$@"; do
    read -r model steps profiled rounds <<<"$spec"
    echo "## $model: --steps $steps --profile-steps $profiled"
    for round in $(seq "$rounds"); do
      for side in base new; do
        "$(dir_of $side)/pgq" train --model "$model" --steps "$steps" --profile-steps "$profiled" --profile-warmup 2 \
          --profile-out "$work/$side.yaml" --profile-ops --no-progress --out "$work/run_${side}_$model$round" 2>&1 |
          sed -n '/^per-op time split of the profiled/,/^$/p' |
          awk -v s="$side" -v r="$round" '/kernel time/{sub(/.*\(/, "("); kt=$0} /quant_stats/{printf "round %s %-4s quant_stats %s ms/step  %s\n", r, s, $2, kt}'
      done
    done
  done
}
