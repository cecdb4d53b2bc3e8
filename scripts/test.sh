#!/usr/bin/env bash
# Installs what is missing, fetches the MNIST files when missing, builds ember and its tests (with
# the CUDA backend wherever the CUDA toolkit is installed, GPU or not) and runs every test. It
# ends with the list of skipped tests and why; since it installed everything the tests need, a
# skip other than the GPU's (test_cuda and each device test's NAME_cuda where no GPU is usable)
# fails the run.
#   scripts/test.sh [extra cmake arguments, e.g. -DEMBER_CUDA=OFF]
# The MNIST files are read from $MNIST_DIR, else data/mnist, which scripts/fetch_mnist.sh fills
# (a download; offline, set MNIST_DIR to a copy or run scripts/fetch_mnist.sh data/mnist --from DIR).
# EMBER_ALLOW_SKIPS="name ..." names further tests that may be skipped ("all": any).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scripts/install_deps.sh --tests
if [ -z "${MNIST_DIR:-}" ]; then scripts/fetch_mnist.sh data/mnist --if-missing; fi
build=${EMBER_BUILD_DIR:-build}
# The configuration scripts/train_mnist.sh gives the same folder, so that a newcomer who ran it first
# compiles nothing twice: -Werror only where $EMBER_WERROR asks for it (CI; CMakeLists.txt).
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build" -j "$(nproc)"
cd "$build"
# Everything the tests need was installed above: a test that falls back for want of it fails.
export EMBER_TEST_SETUP=complete
status=0
ctest --output-on-failure -j "$(nproc)" --output-junit "$PWD/ctest-report.xml" || status=$?
allowed=(test_cuda '*_cuda' ${EMBER_ALLOW_SKIPS:-})
if [ "${EMBER_ALLOW_SKIPS:-}" = all ]; then
  mapfile -t allowed < <(ctest -N | sed -n 's/^ *Test *#[0-9]*: //p')
fi
python3 "$root/scripts/skip_report.py" ctest-report.xml --allow "${allowed[@]}" || { [ $status != 0 ] || status=1; }
exit $status
