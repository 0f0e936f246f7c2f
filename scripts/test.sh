#!/usr/bin/env bash
# Builds pgq and runs its whole test suite (this is what CI runs, via .ci/run):
#   1. scripts/setup.sh: install missing Debian packages, Release build in ./build
#   2. ctest on that build: unit tests, golden IR files, gradient checks, parity with
#      PyTorch, training runs, the installed-package example
#   3. the performance smoke: six speed ratios measured in one process (bench/perf_smoke.cc)
#   4. every test again under AddressSanitizer + UBSan (./build-asan), but PyTorch parity
#      and the installed-package example
#   5. the IR parser under libFuzzer for FUZZ_SECONDS (default 60) (./build-fuzz)
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
if [ ! -f build-asan/build.ninja ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
    -DPGQ_SANITIZE=ON -DPGQ_BUILD_BENCH=OFF
fi
cmake --build build-asan -j "$jobs"
# Every ctest test of the sanitized build (the CLI tests run the sanitized pgq), except
# the PyTorch parity (its C++ side is the executor, tested here against the reference
# evaluator) and the installed-package example (a Release build of another project).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 1500 -LE 'parity|install'

step "fuzzing the IR parser for ${fuzz_seconds}s"
if [ ! -f build-fuzz/build.ninja ]; then
  CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPGQ_FUZZ=ON \
    -DPGQ_BUILD_TESTS=OFF -DPGQ_BUILD_BENCH=OFF -DPGQ_BUILD_CLI=OFF \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
fi
cmake --build build-fuzz -j "$jobs" --target pgq_parser_fuzz
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cp tests/ir/golden/*.pgq "$corpus/"
build-fuzz/tests/fuzz/pgq_parser_fuzz -max_total_time="$fuzz_seconds" -timeout=10 \
  -dict=tests/fuzz/pgq.dict "$corpus" 2>&1 | tail -n 3

step "all tests passed"
