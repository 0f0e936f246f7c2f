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
