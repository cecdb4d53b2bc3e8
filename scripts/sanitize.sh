#!/usr/bin/env bash
# Builds the library, the programs and the CPU tests with sanitizers and runs the tests, which
# also drive the programs. The CUDA backend is left out (below): the CUDA runtime and
# AddressSanitizer do not mix, and GPU memory errors are compute-sanitizer's job.
#   scripts/sanitize.sh [address,undefined | thread]
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizers=${1:-address,undefined}
scripts/install_deps.sh --tests
build=build-sanitize-${sanitizers//,/-}
# Debug with -g1: line tables and function names, what the sanitizers' reports print, without the
# full debug information, whose writing was a fifth of the build (a fresh AddressSanitizer+UBSan
# build on 2 cores: 7 min 40 s with -g, 6 min 14 s with -g1; the tests alike, 3 min 41 s and 3 min 47 s).
# Without the CUDA backend: no GPU test could run here, and the CUDA sources' host code runs under
# AddressSanitizer+UBSan and the race checker on the software GPU (scripts/sim_test.sh), so nvcc's
# compiles are saved in both of these builds.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DEMBER_SANITIZE="$sanitizers" \
  -DEMBER_BUILD_APPS=ON -DEMBER_WERROR=ON -DEMBER_CUDA=OFF
# ThreadSanitizer looks at the tests where ember runs threads of its own — the CPU pool's
# (test_parallel: every parallel kernel at 1, 2 and 3 threads) and the data loader's workers:
# test_data, test_train and the programs' tests, whose runs load with them, all with two compute
# threads — built alone; the rest have none and run under AddressSanitizer. (The MPI tests are not in sanitizer
# builds: Open MPI is not built for them.)
threaded='^(test_parallel|test_data|test_train|cli_tests|predict_variants|predict_variants_fashion|checkpoint_torch)$'
if [ "$sanitizers" = thread ]; then
  cmake --build "$build" -j "$(nproc)" --target test_parallel test_data test_train predict_variants mnist_train mnist_predict
else
  cmake --build "$build" -j "$(nproc)"
fi
cd "$build"
# OpenBLAS's own thread pool is not instrumented, so ThreadSanitizer would report its internal
# hand-offs as races; ember holds it at one thread anyway (Note [CPU threads]), and this makes
# sure of it before the library starts. ember's own pool runs two threads in every test here.
[ "$sanitizers" = thread ] && export OPENBLAS_NUM_THREADS=1 EMBER_NUM_THREADS=2
# Long tests (label "long": whole training runs measured for accuracy) run in the plain build only.
if [ "$sanitizers" = thread ]; then
  ctest --output-on-failure -j "$(nproc)" -R "$threaded" -LE long
else
  ctest --output-on-failure -j "$(nproc)" -E '_cuda$' -LE long
fi
