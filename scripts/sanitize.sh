#!/usr/bin/env bash
# Builds the library, the programs and the CPU tests with sanitizers and runs the tests, which
# also drive the programs (the GPU binary is left out: the CUDA runtime and AddressSanitizer do
# not mix, and GPU memory errors are compute-sanitizer's job).
#   scripts/sanitize.sh [address,undefined | thread]
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizers=${1:-address,undefined}
scripts/install_deps.sh --tests
build=build-sanitize-${sanitizers//,/-}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DEMBER_SANITIZE="$sanitizers" -DEMBER_BUILD_APPS=ON -DEMBER_WERROR=ON
cmake --build "$build" -j "$(nproc)"
cd "$build"
# OpenBLAS's own thread pool is not instrumented, so ThreadSanitizer would report its internal
# hand-offs as races; one OpenBLAS thread leaves ember's threads (the data loader's) to check.
[ "$sanitizers" = thread ] && export OPENBLAS_NUM_THREADS=1
# Long tests (label "long": whole training runs measured for accuracy) run in the plain build only.
ctest --output-on-failure -j "$(nproc)" -E '^test_cuda$' -LE long
