#!/bin/bash
# The many-format statistics pass with stochastic formats paired with the round-to-nearest
# ones of their scales (quant_stats_fused.cc, kPaired), and the integer masks before it
# (stats_int_ops/), against the build before both, in turn, on this machine, 2 threads
# unless said, nothing else running: stats_int_ops/run.sh's files (per_op.txt,
# identical.txt, kernels.txt, steps.txt) written here, and
#   grad4_ab.txt   quant_bench grad4 (a gradient's four formats with their scales),
#                  1 thread, 10 rounds base and new in turn, values sorted
# BASE: a Release build of the code before 60f9438 (its parent, or any commit from
# dffa83c to it); new: this build, as of 33013b7:
#   BASE=/path/to/base/build bash docs/results/stats_paired/run.sh     (~28 min)
# (mca.txt: stats_int_ops/mca.txt's analysis of the paired loop, fusedRun<2, 2, true, false>.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
new=$(cd "$here/../../.." && pwd)/build
base=${BASE:?set BASE to the base build directory}
OUT=$here bash "$here/../stats_int_ops/run.sh"
{
  echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' '): grad4 (a gradient's four formats with their scales, quant_bench), 1 thread, GB/s per thread"
  echo "# 10 rounds, base (a Release build of 2cfcb67) and new (33013b7) in turn, values sorted:"
  echo "#   for i in \$(seq 10); do for b in BASE NEW; do \$b/bench/quant_bench --benchmark_filter='(act2048x1024|weight1024x1024)/grad4/threads:1' --benchmark_min_time=0.3; done; done"
  for i in $(seq 10); do
    for side in base new; do
      if [ $side = base ]; then dir=$base; else dir=$new; fi
      OMP_NUM_THREADS=1 "$dir/bench/quant_bench" --benchmark_filter='(act2048x1024|weight1024x1024)/grad4/threads:1' \
        --benchmark_min_time=0.3 2>&1 | grep -A3 'grad4  grad4_each' | tail -2 | awk -v b=$side '{print b, $1, $3}'
    done
  done | sort | awk '{k=$1" "$2; a[k]=a[k]" "$3} END{for(k in a) print k, a[k]}' | sort
} >"$here/grad4_ab.txt"
