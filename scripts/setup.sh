#!/usr/bin/env bash
# Installs the Debian packages pgq needs (only those missing), then configures and
# builds pgq with CMake in ./build (Release, -j2), and assembles the English corpus of
# `--corpus english` in ./data/english (docs/CORPUS.md). Idempotent: when everything is
# installed, built and assembled it does nothing but check, in a couple of seconds.
#
#   scripts/setup.sh            install + build
#   BUILD_DIR=out scripts/setup.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
jobs=${JOBS:-2}

# Build tools, libraries, the PyTorch reference used by the parity tests (with a
# threaded BLAS so it is a fair peer; python3-onnx reads modern exports' metadata in
# tests/onnx/modern), the default corpus, gnuplot for the plots,
# SentencePiece, Open MPI (multi-process training under mpirun, docs/DISTRIBUTED.md),
# and the packages the English corpus is assembled from.
packages=(
  build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
  libfmt-dev libspdlog-dev libeigen3-dev libdnnl-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev libcli11-dev
  python3 python3-torch python3-numpy python3-yaml python3-onnx libopenblas0-pthread
  fortunes gnuplot-nox libomp-dev libre2-dev
  libonnx-dev libprotobuf-dev libonnx-testdata
  libsentencepiece-dev openmpi-bin libopenmpi-dev procps bible-kjv bible-kjv-text dict-gcide wordnet-base
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$status" = "installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build_dir" -j "$jobs"

# SOURCES.txt is written last: with it there, the corpus is complete.
english=$root/data/english
if [ ! -f "$english/SOURCES.txt" ] || [ ! -f "$english/train.txt" ] || [ ! -f "$english/val.txt" ]; then
  echo "setup: assembling the English corpus in $english"
  /usr/bin/python3 "$root/scripts/make_english_corpus.py" "$english"
fi
