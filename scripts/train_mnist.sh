#!/usr/bin/env bash
# The main job: installs what is missing, builds ember (Release) and runs it on the best device.
# Until mnist_train lands this runs ember_info: the device chosen and why, and a host↔device round
# trip on it.
#   scripts/train_mnist.sh [program arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
build=${EMBER_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target ember_info
"$build/apps/ember_info" "$@"
