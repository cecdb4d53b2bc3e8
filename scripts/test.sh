#!/usr/bin/env bash
# Installs what is missing, builds ember and its tests (with the CUDA backend wherever the CUDA
# toolkit is installed, GPU or not) and runs every test. Where no GPU is usable, CTest reports
# the GPU test binary as skipped.
#   scripts/test.sh [extra cmake arguments, e.g. -DEMBER_CUDA=OFF]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --tests
build=${EMBER_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DEMBER_WERROR=ON "$@"
cmake --build "$build" -j "$(nproc)"
cd "$build"
ctest --output-on-failure -j "$(nproc)"
