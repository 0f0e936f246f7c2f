#!/usr/bin/env bash
# pgq vs PyTorch on one batch: loss and every parameter gradient (f32).
#   run_parity.sh PARITY_DUMP_BINARY SOURCE_DIR MODEL
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
OMP_NUM_THREADS=1 "$1" "$3" "$dir"
/usr/bin/python3 "$2/tests/parity/torch_parity.py" "$dir"
