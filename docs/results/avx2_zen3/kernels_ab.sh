#!/bin/bash
# The kernels changed in the statistics-kernel section (183da81: quant_stats' fast path,
# symmetric scales from magnitudes) on this Zen 3: a Release build of fde71ab (BASE) and
# this build, in turn, 1 thread: quant_bench (GB/s per thread) and the perf smoke's
# kernel ratios. BASE: git worktree add /work/wt-base fde71ab; cmake -S /work/wt-base -B
# /work/wt-base/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPGQ_BUILD_TESTS=OFF; ninja
# -C /work/wt-base/build perf_smoke quant_bench.
#   BASE=/work/wt-base/build bash docs/results/avx2_zen3/kernels_ab.sh >kernels_ab.txt
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
new=$(cd "$here/../../.." && pwd)/build
base=${BASE:?set BASE to the base build directory}
filter='(act2048x1024|weight1024x1024)/(params|dynamic|stats_rtn|stats_sr)/threads:1'
echo "# quant_bench --benchmark_min_time=0.3 --benchmark_filter='$filter'; perf_smoke (its gemm and quantize ratios)"
for round in 1 2 3; do
  for side in base new; do
    if [ $side = new ]; then dir=$new; else dir=$base; fi
    echo "## round $round: $side"
    "$dir/bench/quant_bench" --benchmark_min_time=0.3 --benchmark_filter="$filter" 2>/dev/null |
      grep -E '^(tensor|act2048x1024 |weight1024x1024 )'
    "$dir/bench/perf_smoke" 2>&1 | grep -E 'perf smoke (gemm|quantize|q/scales)'
  done
done
