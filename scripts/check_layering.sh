#!/usr/bin/env bash
# Checks the direction of ember's include arrows: apps → train → layers/optim/data/distributed → core → kernels.
# Nothing includes a folder above its own; nothing outside tests/ includes tests/; only apps/ and
# its tests include apps/. kernels/ may use only core/base/ (errors, dtypes, the generated config.h)
# from core/, and is itself included only where kernels must be called (the exceptions below,
# each with its reason). Nothing includes the software GPU's headers (sim/), except that tests may
# read what it observed (ember_sim/introspection.h, in its builds only). Prints each
# violation; exits 1 if any.
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2

# Who may include kernels/: the file's path (or its folder) and why.
kernels_allowed() {
  case "$1" in
    kernels/*) return 0 ;;               # the kernels themselves
    core/*) return 0 ;;                  # ops reach the kernels through core/ops/dispatch.h
    optim/*.cpp) return 0 ;;             # the multi-tensor update kernels and their slot tables
    train/*) return 0 ;;                 # whole training steps call the kernels directly, by design
    apps/bench_kernels.cpp | apps/bench/*) return 0 ;;  # the kernel benchmark (its table of cases in apps/bench/) measures the kernels themselves
    tests/*) return 0 ;;                 # tests compare each kernel with its twin
    extension.h | extension_cuda.cuh) return 0 ;;  # the extension API hands out WriteMode and the launch helper
    *) return 1 ;;
  esac
}

# Inside core/: base/ stands below everything and includes only itself; the heart's and the CUDA
# runtime's interfaces (core/tensor/*.h, core/cuda/*.h) stand below the ops and I/O. Their .cpp
# files may call ops (Tensor's arithmetic is written with them, as PyTorch's Tensor methods call
# ATen's ops).
core_room_allowed() {  # core_room_allowed <including file> <included core path>
  local file=$1 inc=$2
  case "$file" in
    core/base/*) [[ "$inc" == core/base/* ]] ;;
    core/tensor/*.h | core/cuda/*.h) [[ "$inc" == core/base/* || "$inc" == core/tensor/* || "$inc" == core/cuda/* ]] ;;
    *) return 0 ;;
  esac
}

allowed() {  # allowed <including file> <included path>
  local file=$1 inc=$2 from=${1%%/*}
  [ "$from" = "$file" ] && from=apps  # the umbrella headers at the root stand above every folder, as programs do
  case "$inc" in
    apps/*) [ "$from" = apps ] || [ "$from" = tests ] ;;  # tests/apps tests what the programs share
    tests/*) [ "$from" = tests ] ;;
    ember_sim/introspection.h) [ "$from" = tests ] ;;  # what the software GPU saw, for tests on it
    ember_sim/*) return 1 ;;  # the software GPU stands in at link time; no file of ember names it
    kernels/*) kernels_allowed "$file" ;;
    core/base/*) return 0 ;;             # errors, dtypes and the generated config.h: what kernels need
    core/*) [ "$from" != kernels ] && core_room_allowed "$file" "$inc" ;;
    train/*) [ "$from" = apps ] || [ "$from" = tests ] || [ "$from" = train ] ;;
    layers/* | optim/* | data/* | distributed/*) [ "$from" = apps ] || [ "$from" = tests ] || [ "$from" = train ] || [ "$from" = "${inc%%/*}" ] ;;
    *) return 0 ;;
  esac
}

bad=0
while IFS= read -r file; do
  while IFS= read -r inc; do
    if ! allowed "$file" "$inc"; then
      echo "layering: $file includes $inc (arrows point down only: apps → train → layers/optim/data/distributed → core → kernels; kernels/ only from core, optim's .cpp files, train/, bench_kernels and tests; inside core: base/ includes only itself, tensor/ and cuda/ headers only base/, tensor/, cuda/; sim/ from nowhere but tests' ember_sim/introspection.h)"
      bad=1
    fi
  done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/p' "$file")
done < <({ ls ember.h extension.h extension_cuda.cuh extension_version.h 2>/dev/null
           find apps train layers optim data distributed core kernels tests examples -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null; } | sort)
[ $bad = 0 ] && echo "layering: ok"
exit $bad
