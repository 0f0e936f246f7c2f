#!/usr/bin/env bash
# Builds pgq and runs its whole test suite (this is what CI runs, via .ci/run):
#   1. scripts/setup.sh: install missing Debian packages, Release build in ./build
#   2. ctest on that build: unit tests, golden IR files, gradient checks, parity with
#      PyTorch, training runs, the installed-package example
#   3. the performance smoke: ten speed ratios (one fewer where the CPU has no bf16 dot
#      products, one fewer where it has no AVX-512)
#      measured in one process (bench/perf_smoke.cc)
#   4. every test again under AddressSanitizer + UBSan (./build-asan), but PyTorch parity
#      and the installed-package example
#   5. under libFuzzer (./build-fuzz): the IR parser and the ONNX importer for
#      FUZZ_SECONDS (default 60) each, the YAML readers for half that
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=${JOBS:-2}
fuzz_seconds=${FUZZ_SECONDS:-60}
cd "$root"

step() { printf '\n==== %s\n' "$*"; }

step "setup and Release build"
scripts/setup.sh

step "ctest (Release)"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 1500

step "performance smoke: int8 GEMM, quantizer, thread scaling, F+B and profiled step ratios (bench/perf_smoke.cc)"
build/bench/perf_smoke

step "sanitizers: every test binary under ASan + UBSan (./build-asan)"
# -g1 (line tables: the sanitizers' reports still name file and line) compiles a third
# faster than -g here (cli/main.cc: 28 s vs 40 s on 2 vCPUs), which keeps CI in its budget.
if [ ! -f build-asan/build.ninja ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g1 -O1" \
    -DPGQ_SANITIZE=ON -DPGQ_BUILD_BENCH=OFF
fi
cmake --build build-asan -j "$jobs"
# Every ctest test of the sanitized build (the CLI tests run the sanitized pgq), except
# the PyTorch parity (its C++ side is the executor, tested here against the reference
# evaluator) and the installed-package example (a Release build of another project).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 1500 -LE 'parity|install'

step "fuzzing the IR parser, the ONNX importer (${fuzz_seconds}s each) and the YAML readers"
if [ ! -f build-fuzz/build.ninja ]; then
  CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPGQ_FUZZ=ON \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DPGQ_BUILD_TESTS=OFF -DPGQ_BUILD_BENCH=OFF -DPGQ_BUILD_CLI=OFF \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
fi
cmake --build build-fuzz -j "$jobs" --target pgq_parser_fuzz pgq_onnx_import_fuzz pgq_yaml_fuzz
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
mkdir "$corpus/ir" "$corpus/onnx" "$corpus/yaml"
cp tests/ir/golden/*.pgq "$corpus/ir/"
build-fuzz/tests/fuzz/pgq_parser_fuzz -max_total_time="$fuzz_seconds" -timeout=10 \
  -dict=tests/fuzz/pgq.dict "$corpus/ir" 2>&1 | tail -n 3
# Seeds: PyTorch 2.11 exports and ONNX's own node test models (every op pgq folds or
# imports, at their opsets).
for m in tests/data/onnx_modern/*/model.onnx; do cp "$m" "$corpus/onnx/$(basename "$(dirname "$m")").onnx"; done
for d in /usr/share/libonnx-testdata/data/node/test_{add,matmul,gemm,softmax,layer_normalization,gather,reshape,slice,split,where,concat,transpose,expand,range,trilu,cumsum,erf,pow,reduce_mean,cast}*; do
  [ -f "$d/model.onnx" ] && cp "$d/model.onnx" "$corpus/onnx/$(basename "$d").onnx"
done
build-fuzz/tests/fuzz/pgq_onnx_import_fuzz -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2560 \
  "$corpus/onnx" 2>&1 | tail -n 3
# The first byte picks the reader: 0 profile, 1 recipe, 2 hardware model, 3 policy. A
# profile and a recipe of the tiny model are made with the Release build.
build/pgq train --model tiny --steps 2 --no-progress --profile-steps 1 --profile-out "$corpus/p.yaml" \
  --out "$corpus/run" >/dev/null
build/pgq recipe --profile "$corpus/p.yaml" --hardware epyc-zen3-2c --policy F+B -o "$corpus/r.yaml" >/dev/null 2>&1
{ printf '\x00'; cat "$corpus/p.yaml"; } >"$corpus/yaml/profile"
{ printf '\x01'; cat "$corpus/r.yaml"; } >"$corpus/yaml/recipe"
i=0
for f in recipes/hardware/*.yaml recipes/policies/*.yaml tests/plan/*.yaml; do
  case $f in recipes/hardware/*) k='\x02' ;; *) k='\x03' ;; esac
  { printf "$k"; cat "$f"; } >"$corpus/yaml/seed$((i += 1))"
done
build-fuzz/tests/fuzz/pgq_yaml_fuzz -max_total_time="$((fuzz_seconds / 2))" -timeout=10 "$corpus/yaml" 2>&1 |
  tail -n 3

step "all tests passed"
