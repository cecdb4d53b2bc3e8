#!/usr/bin/env bash
# Installs a built ember, moves the installed prefix elsewhere (the package must be relocatable),
# then builds examples/custom_layer — a separate project that finds ember with find_package(ember)
# and compiles its own CUDA kernel with ember_add_extension — against it and runs its tests: both
# layers gradchecked, the GELU kernel on CUDA against the CPU where a CUDA device exists (a GPU,
# or ember's software GPU for a -DEMBER_CUDA=SIM build). With an MNIST folder, it also trains the
# example model and loads its checkpoint into PyTorch (check_torch.py, with PYTHON). Without
# CMake, a program built with pkg-config's flags must link and run too.
#   scripts/test_install.sh BUILD_DIR [MNIST_DIR [PYTHON]]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: scripts/test_install.sh BUILD_DIR [MNIST_DIR [PYTHON]]}" && pwd)
mnist=${2:-}
python=${3:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/installed-here" >/dev/null
mv "$work/installed-here" "$work/moved-there"
prefix=$work/moved-there
compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
cmake -S "$root/examples/custom_layer" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$compiler" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" -j "$(nproc)" >/dev/null
echo "test_install: the example built against $prefix (installed elsewhere, then moved)"
# Where ember has CUDA, the example's own CUDA kernel must have been compiled, not left out.
if grep -q '#define EMBER_WITH_CUDA 1' "$prefix/include/ember/core/base/config.h"; then
  if ! find "$work/build" -name 'gelu.cu.o' | grep -q .; then
    echo "test_install: ember has CUDA but ember_add_extension did not compile gelu.cu" >&2
    exit 1
  fi
  nvcc=$(find "$work/build/CMakeFiles" -name CMakeCUDACompiler.cmake -exec sed -n 's/^set(CMAKE_CUDA_COMPILER "\(.*\)")/\1/p' {} +)
  echo "test_install: the example's gelu.cu was compiled by ${nvcc:-$compiler, for the software GPU}"
fi
"$work/build/custom_layer" test
if [ -n "$mnist" ] && [ -f "$mnist/t10k-images-idx3-ubyte.gz" -o -f "$mnist/t10k-images-idx3-ubyte" ]; then
  result=$("$work/build/custom_layer" train "$mnist" "$work/model.safetensors" | tee /dev/stderr | tail -1)
  accuracy=$(echo "$result" | sed -n 's/.*"test_acc": \([0-9.]*\).*/\1/p')
  status=0
  "$python" "$root/examples/custom_layer/check_torch.py" "$work/model.safetensors" "$mnist" "$accuracy" || status=$?
  [ $status = 0 ] || [ $status = 77 ] || exit 1
  [ $status = 0 ] || echo "test_install: the checkpoint was not checked in PyTorch ($python lacks torch or safetensors)"
fi
if [ -f "$prefix/lib/pkgconfig/ember.pc" ] && command -v pkg-config >/dev/null; then
  cat >"$work/pc.cpp" <<'CPP'
#include <ember/ember.h>
int main() { return ember::sum(ember::ones({3})).item<float>() == 3.0f ? 0 : 1; }
CPP
  # shellcheck disable=SC2046
  "$compiler" "$work/pc.cpp" -o "$work/pc" $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs ember)
  "$work/pc" && echo "test_install: a program built with pkg-config's flags links and runs"
fi
echo "test_install: ok"
