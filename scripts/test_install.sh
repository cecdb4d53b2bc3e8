#!/usr/bin/env bash
# Installs a built ember into a temporary prefix, then builds and runs examples/custom_layer — a
# separate project that finds ember with find_package(ember) — against it.
#   scripts/test_install.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: scripts/test_install.sh BUILD_DIR}" && pwd)
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix/install" >/dev/null
cmake -S "$root/examples/custom_layer" -B "$prefix/build" -DCMAKE_PREFIX_PATH="$prefix/install" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$prefix/build" -j "$(nproc)" >/dev/null
"$prefix/build/custom_layer"
