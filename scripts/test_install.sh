#!/usr/bin/env bash
# Installs a built ember, moves the installed prefix elsewhere (the package must be relocatable),
# then builds every project under examples/ against it, as a project of one's own finds ember
# (find_package(ember), headers as <ember/...>). examples/custom_layer, which also compiles its own
# CUDA kernel with ember_add_extension, runs its tests: both layers gradchecked, the GELU kernel on
# CUDA against the CPU where a CUDA device exists (a GPU, or ember's software GPU for a
# -DEMBER_CUDA=SIM build). With an MNIST folder, it also trains the example model and loads its
# checkpoint into PyTorch (check_torch.py, with PYTHON), and examples/mnist_mlp (the README's loop)
# trains on a 6,000-image part of MNIST and must score above 80%. Without CMake, a program built
# with pkg-config's flags must link and run too.
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
built=0
for example in "$root"/examples/*/CMakeLists.txt; do
  name=$(basename "$(dirname "$example")")
  if ! { cmake -S "$(dirname "$example")" -B "$work/build-$name" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_CXX_COMPILER="$compiler" -DCMAKE_BUILD_TYPE=Release && cmake --build "$work/build-$name" -j "$(nproc)"; } \
    >"$work/$name.log" 2>&1; then
    tail -40 "$work/$name.log" >&2
    echo "test_install: examples/$name does not build against the installed ember (above: the end of its log)" >&2
    exit 1
  fi
  echo "test_install: examples/$name built against $prefix (installed elsewhere, then moved)"
  built=$((built + 1))
done
[ "$built" -ge 2 ] || { echo "test_install: found $built projects under $root/examples, expected 2 or more" >&2; exit 1; }
# Where ember has CUDA, the example's own CUDA kernel must have been compiled, not left out.
if grep -q '#define EMBER_WITH_CUDA 1' "$prefix/include/ember/base/config.h"; then
  if ! find "$work/build-custom_layer" -name 'gelu.cu.o' | grep -q .; then
    echo "test_install: ember has CUDA but ember_add_extension did not compile gelu.cu" >&2
    exit 1
  fi
  nvcc=$(find "$work/build-custom_layer/CMakeFiles" -name CMakeCUDACompiler.cmake -exec sed -n 's/^set(CMAKE_CUDA_COMPILER "\(.*\)")/\1/p' {} +)
  echo "test_install: the example's gelu.cu was compiled by ${nvcc:-$compiler, for the software GPU}"
fi
"$work/build-custom_layer/custom_layer" test
has_mnist=0
if [ -n "$mnist" ] && { [ -f "$mnist/t10k-images-idx3-ubyte.gz" ] || [ -f "$mnist/t10k-images-idx3-ubyte" ]; }; then
  has_mnist=1
fi
if [ "$has_mnist" = 1 ]; then
  result=$("$work/build-custom_layer/custom_layer" train "$mnist" "$work/model.safetensors" | tee /dev/stderr | tail -1)
  accuracy=$(echo "$result" | sed -n 's/.*"test_acc": \([0-9.]*\).*/\1/p')
  status=0
  "$python" "$root/examples/custom_layer/check_torch.py" "$work/model.safetensors" "$mnist" "$accuracy" || status=$?
  [ $status = 0 ] || [ $status = 77 ] || exit 1
  [ $status = 0 ] || echo "test_install: the checkpoint was not checked in PyTorch ($python lacks torch or safetensors)"
fi
if [ "$has_mnist" = 1 ]; then
  # examples/mnist_mlp reads data/mnist of the folder it runs in: there, the first 6,000 training
  # and 1,000 test images (IDX files cut short, their counts rewritten) keep its 5 epochs short.
  mkdir -p "$work/mlp/data/mnist"
  python3 - "$mnist" "$work/mlp/data/mnist" <<'PY'
import gzip, os, sys
source, target = sys.argv[1:]
for split, count in (("train", 6000), ("t10k", 1000)):
    for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        name = f"{split}-{kind}"
        path = os.path.join(source, name)
        data = open(path, "rb").read() if os.path.exists(path) else gzip.open(path + ".gz").read()
        dims = data[3]
        sizes = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
        sample = 1
        for size in sizes[1:]:
            sample *= size
        count = min(count, sizes[0])
        start = 4 + 4 * dims
        with open(os.path.join(target, name), "wb") as out:
            out.write(data[:4] + count.to_bytes(4, "big") + data[8:start] + data[start:start + count * sample])
PY
  (cd "$work/mlp" && "$work/build-mnist_mlp/mnist_mlp") | tee "$work/mlp.txt"
  accuracy=$(sed -n 's/^test accuracy: \([0-9.]*\).*/\1/p' "$work/mlp.txt")
  [ -s "$work/mlp/mnist.safetensors" ] || { echo "test_install: examples/mnist_mlp wrote no mnist.safetensors" >&2; exit 1; }
  python3 -c "import sys; sys.exit(0 if float('${accuracy:-0}') > 0.8 else 1)" ||
    { echo "test_install: examples/mnist_mlp: test accuracy ${accuracy:-missing}, expected above 0.8" >&2; exit 1; }
  echo "test_install: examples/mnist_mlp trained on 6,000 images: test accuracy $accuracy"
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
