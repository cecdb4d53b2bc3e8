#!/usr/bin/env bash
# Builds ember for the software GPU (sim/: the CUDA sources compiled by clang, run on the CPU) and
# runs the tests labelled "sim" — the GPU test binary, whole mnist_train runs against the CPU
# (sim_training) and the simulator's own tests.
#   scripts/sim_test.sh [plain | address,undefined | thread]   (default: address,undefined)
# Environment: EMBER_SIM_SCHEDULES=2 runs every launch under two block orders and compares them.
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizers=${1:-address,undefined}
scripts/install_deps.sh --tests >/dev/null
build=build-sim-${sanitizers//,/-}
flags=(-DEMBER_CUDA=SIM -DEMBER_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_BUILD_APPS=ON)
[ "$sanitizers" = plain ] || flags+=(-DEMBER_SANITIZE="$sanitizers")
CXX=clang++ cmake -S . -B "$build" "${flags[@]}" >/dev/null
targets=(test_cuda test_sim sim_checks)
[ "$sanitizers" = thread ] || targets+=(mnist_train)  # sim_training: not under ThreadSanitizer (minutes there)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
cd "$build"
ctest --output-on-failure -j "$(nproc)" -L sim
