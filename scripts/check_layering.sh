#!/usr/bin/env bash
# Checks the direction of ember's include arrows between folders, top to bottom:
#   apps → train → layers/optim/data/distributed → core → kernels → base
# and inside core/: io/ and ops/ → tensor/ → cuda/. Every arrow points down. base/ (errors, dtypes,
# Device and MemoryKind as values, the generated config.h) includes only itself. Nothing outside
# tests/ includes tests/; only apps/ and its tests include apps/. kernels/ is included only where
# kernels must be called (the list below, each with its reason). Nothing includes the software
# GPU's headers (sim/), except that tests may read what it observed (ember_sim/introspection.h, in
# its builds only). One exception to "down", with its reason: core/tensor's .cpp files write
# Tensor's arithmetic with the ops (as PyTorch's Tensor methods call ATen's); its headers do not.
# Prints each violation; exits 1 if any. With --graph, also prints the include graph between
# folders (core/ by room), one "from → to: includes" line per arrow.
#   scripts/check_layering.sh [ROOT] [--graph]
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
graph=${2:-}
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

# Inside core/: which rooms a file may include, by the room it is in.
core_room_allowed() {  # core_room_allowed <including file> <included core path>
  local file=$1 inc=$2
  case "$file" in
    core/cuda/*) [[ "$inc" == core/cuda/* ]] ;;
    core/tensor/*.cpp) [[ "$inc" == core/tensor/* || "$inc" == core/cuda/* || "$inc" == core/ops/* ]] ;;
    core/tensor/*) [[ "$inc" == core/tensor/* || "$inc" == core/cuda/* ]] ;;
    core/io/*) [[ "$inc" == core/io/* || "$inc" == core/tensor/* || "$inc" == core/cuda/* ]] ;;
    core/ops/*) [[ "$inc" == core/ops/* || "$inc" == core/tensor/* || "$inc" == core/cuda/* ]] ;;
    *) return 0 ;;
  esac
}

allowed() {  # allowed <including file> <included path>
  local file=$1 inc=$2 from=${1%%/*}
  [ "$from" = "$file" ] && from=apps  # the umbrella headers at the root stand above every folder, as programs do
  [ "$from" = base ] && { [[ "$inc" == base/* ]]; return; }  # the floor stands on nothing
  case "$inc" in
    apps/*) [ "$from" = apps ] || [ "$from" = tests ] ;;  # tests/apps tests what the programs share
    tests/*) [ "$from" = tests ] ;;
    ember_sim/introspection.h) [ "$from" = tests ] ;;  # what the software GPU saw, for tests on it
    ember_sim/*) return 1 ;;  # the software GPU stands in at link time; no file of ember names it
    base/*) return 0 ;;
    kernels/*) kernels_allowed "$file" ;;
    core/*) [ "$from" != kernels ] && core_room_allowed "$file" "$inc" ;;
    train/*) [ "$from" = apps ] || [ "$from" = tests ] || [ "$from" = train ] ;;
    layers/* | optim/* | data/* | distributed/*) [ "$from" = apps ] || [ "$from" = tests ] || [ "$from" = train ] || [ "$from" = "${inc%%/*}" ] ;;
    *) return 0 ;;
  esac
}

# The folder a path stands in, core/ by room ("core/ops"); the root's headers as "(root)".
folder() { case "$1" in core/*/*) echo "${1%/*}" | cut -d/ -f1-2 ;; */*) echo "${1%%/*}" ;; *) echo "(root)" ;; esac; }

bad=0
edges=()
while IFS= read -r file; do
  while IFS= read -r inc; do
    [ "$graph" = --graph ] && [ "$(folder "$file")" != "$(folder "$inc")" ] && edges+=("$(folder "$file") → $(folder "$inc")")
    if ! allowed "$file" "$inc"; then
      echo "layering: $file includes $inc (arrows point down only: apps → train → layers/optim/data/distributed → core → kernels → base; base/ includes only itself; kernels/ only from core, optim's .cpp files, train/, bench_kernels and tests; inside core: io/ and ops/ → tensor/ → cuda/, and tensor's .cpp files may call ops; sim/ from nowhere but tests' ember_sim/introspection.h)"
      bad=1
    fi
  done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/p' "$file")
done < <({ ls ember.h extension.h extension_cuda.cuh extension_version.h 2>/dev/null
           find apps train layers optim data distributed core kernels base tests examples -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null; } | sort)
[ "$graph" = --graph ] && printf '%s\n' "${edges[@]}" | sort | uniq -c | awk '{ n = $1; $1 = ""; print substr($0, 2) ": " n }'
[ $bad = 0 ] && echo "layering: ok"
exit $bad
