#!/bin/bash
# Units of the statistics pass whose absmax is below 2^-40 are summed again in double
# (kernels/stats_sink.h needsWideSums, fad7036) against the build before (b454261), in
# turn, on this machine, nothing else running:
#   identical.txt  the profiles of small from both builds, timings left out: the int8/int7
#                  defaults, and 12 schemes and formats with --profile-metrics --profile-outputs
#   kernels.txt    quant_bench, 1 thread, 3 rounds, base and new in turn: the single-format
#                  statistics (int8 rtn/sr, e4m3, mxfp8) and a gradient's four formats (grad4)
#                  (then 6 rounds of grad4 alone, run by hand, appended)
#   per_op.txt     pgq train --profile-ops: quant_stats per profiled step of small, 3 rounds
# BASE: a Release build of b454261 (pgq_cli and quant_bench):
#   BASE=/path/to/base/build bash docs/results/stats_tiny_units/run.sh     (~4 min)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../ab_common.sh"
cd "$here"
identical_ab >identical.txt
stats_kernels_ab >kernels.txt
quant_stats_ab "small 6 4 3" >per_op.txt
