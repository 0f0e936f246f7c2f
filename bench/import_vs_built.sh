#!/usr/bin/env bash
# Step time of an imported model against a built one of the same shapes, f32 and F+B
# (every GEMM the roofline keeps in int8), runs interleaved so that the machine's drift
# hits both alike; prints each run and the ratio of the medians.
#   bench/import_vs_built.sh PGQ BUILT_MODEL IMPORTED.onnx [RUNS]
set -euo pipefail
pgq=$1 built=$2 imported=$3 runs=${4:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
ms() { grep -o '^[0-9.]* ms/step' | cut -d' ' -f1; }
for side in built imported; do
  m=${!side}
  "$pgq" train --model "$m" --steps 25 --profile-warmup 20 --profile-steps 2 --profile-out "$work/$side.yaml" \
      --out "$work/$side-profile" --no-progress --eval-every 0 > /dev/null
  "$pgq" recipe --profile "$work/$side.yaml" --hardware epyc-zen3-2c --policy 'F+B' -o "$work/$side-recipe.yaml" \
      > /dev/null 2>&1
done
declare -A times
for run in $(seq "$runs"); do
  for side in built imported; do
    m=${!side}
    f=$("$pgq" train --model "$m" --steps 30 --out "$work/r" --no-progress --eval-every 0 | ms)
    rm -rf "$work/r"
    q=$("$pgq" train --model "$m" --steps 30 --recipe "$work/$side-recipe.yaml" --out "$work/r" --no-progress \
        --eval-every 0 | ms)
    rm -rf "$work/r"
    times[$side-f32]+="$f " times[$side-q]+="$q "
    echo "run $run $side: f32 $f ms/step, F+B $q ms/step"
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for kind in f32 q; do
  b=$(echo "${times[built-$kind]}" | median) i=$(echo "${times[imported-$kind]}" | median)
  awk -v k="$kind" -v b="$b" -v i="$i" 'BEGIN {printf "%s: built %.1f ms, imported %.1f ms, imported/built %.3fx\n", (k == "q" ? "F+B" : "f32"), b, i, i / b}'
done
