#!/usr/bin/env bash
# Prepares a GPU check for a machine that has the CUDA toolkit and Python with PyTorch but no
# package registry: downloads the Debian packages ember builds with into .deps/debs (they are
# unpacked there by scripts/gpu_check.sh: unpacked OpenBLAS is too big to carry) and copies the
# MNIST files into data/mnist (from the folder given, else $MNIST_DIR; with neither, data/mnist
# must already hold them: scripts/fetch_mnist.sh). Both folders are ignored by git. Idempotent.
#   scripts/prepare_gpu_check.sh [MNIST_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mnist_src=${1:-${MNIST_DIR:-}}
# Resolved now: the downloads below change the working directory.
[ -n "$mnist_src" ] && [ -d "$mnist_src" ] && mnist_src=$(cd "$mnist_src" && pwd)

# What the build needs beyond the toolkit: headers, OpenBLAS and its Fortran runtime.
debs=(catch2 libcli11-dev nlohmann-json3-dev libstb-dev zlib1g-dev zlib1g
      libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0 libssl-dev libssl3)

mkdir -p "$root/.deps/debs"
cd "$root/.deps/debs"
need=()
for p in "${debs[@]}"; do
  ls "${p}"_*.deb >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  if ! apt-get download "${need[@]}" 2>/dev/null; then
    apt-get update -qq
    apt-get download "${need[@]}"
  fi
fi
git -C "$root" rev-parse HEAD >"$root/.deps/commit" 2>/dev/null || echo unknown >"$root/.deps/commit"
echo "prepare: $(ls "$root"/.deps/debs/*.deb | wc -l) packages in .deps/debs ($(du -sh "$root/.deps/debs" | cut -f1))"

if [ -n "$mnist_src" ] && [ -d "$mnist_src" ]; then
  "$root/scripts/fetch_mnist.sh" "$root/data/mnist" --from "$mnist_src" >/dev/null
  echo "prepare: MNIST copied to data/mnist ($(ls "$root/data/mnist" | wc -l) files)"
elif [ -n "$mnist_src" ]; then
  echo "prepare: $mnist_src is not a folder: give the folder that holds the four MNIST .gz files" >&2
  exit 2
elif [ -f "$root/data/mnist/train-images-idx3-ubyte.gz" ]; then
  echo "prepare: MNIST in data/mnist ($(ls "$root/data/mnist" | wc -l) files)"
else
  echo "prepare: warning: no MNIST files (data/mnist is empty and no folder was given); the training section will be skipped" >&2
fi
