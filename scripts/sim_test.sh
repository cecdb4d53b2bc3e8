#!/usr/bin/env bash
# Builds ember for the software GPU (sim/: the CUDA sources compiled by clang, run on the CPU) and
# runs the tests labelled "sim" — the GPU test binary, every op of the op table against the CPU
# (ops_cuda), the other tests written once per device (NAME_cuda), whole mnist_train runs against
# the CPU (sim_training) and the simulator's own tests.
#   scripts/sim_test.sh [plain | address,undefined | thread]   (default: address,undefined)
# `thread` is the race checker's build: every load and store of the CUDA sources checked by CUDA's
# rules (sim/src/races.h), ThreadSanitizer on the host's threads.
# Environment: EMBER_SIM_SCHEDULES=n runs every launch under n schedules (block and thread orders)
# and compares them bit for bit.
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizers=${1:-address,undefined}
scripts/install_deps.sh --tests >/dev/null
build=build-sim-${sanitizers//,/-}
flags=(-DEMBER_CUDA=SIM -DEMBER_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_BUILD_APPS=ON)
[ "$sanitizers" = plain ] || flags+=(-DEMBER_SANITIZE="$sanitizers")
CXX=clang++ cmake -S . -B "$build" "${flags[@]}" >/dev/null
targets=(test_cuda device_tests test_sim sim_checks sim_speed)
[ "$sanitizers" = thread ] || targets+=(mnist_train)  # sim_training: not under ThreadSanitizer (minutes there)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
cd "$build"
ctest --output-on-failure -j "$(nproc)" -L sim
