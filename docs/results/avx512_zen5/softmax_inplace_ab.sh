#!/bin/bash
# Softmax and softmax_grad written over the operand nothing else reads (8fa497b) against
# the build before (023c23d), on this AVX-512 CPU, in turn, nothing else running:
#   softmax_inplace_per_op.txt  `pgq train --profile-ops` of `medium` with FB_medium.yaml,
#                               4 steps, both builds, 3 rounds: the softmax kernels
#                               (which also quantize P and dS) and the kernel time
#   softmax_inplace_identical.txt  `medium`'s F+B checkpoint after 3 steps, both builds
#   BASE=/path/to/build/of/023c23d BASE_REV=023c23d bash docs/results/avx512_zen5/softmax_inplace_ab.sh   (~5 min)
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh"
ab_identical_medium >softmax_inplace_identical.txt
for round in 1 2 3; do
  echo "# round $round"
  ab_medium_per_op 'ms/step \(|kernel time|^  softmax(_grad)?\+quantize '
done >softmax_inplace_per_op.txt
