#!/usr/bin/env bash
# Prepares a GPU check for a machine that has the CUDA toolkit and Python with PyTorch but no
# package registry: downloads the Debian packages ember builds with into .deps/debs (they are
# unpacked there by scripts/gpu_check.sh: unpacked OpenBLAS is too big to carry) and copies the
# MNIST files into data/mnist (from the folder given, else $MNIST_DIR; with neither, data/mnist
# must already hold them: scripts/fetch_mnist.sh). Both folders are ignored by git. Idempotent.
# And it writes the plan, .deps/gpu_check_plan.txt: the commit of the ledger's last run on a GPU
# (docs/results/gpu-checks.md, its "Runs" table), the sections of scripts/gpu_check.sh whose code
# changed since (committed or not; the table below), and those commits. The GPU machine's copy of
# the tree has no history, so the plan travels in .deps, and gpu_check.sh runs those sections first.
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

# ---- the plan ----------------------------------------------------------------------------------
# Which sections a changed path puts first: each line is a path prefix and the sections that check
# what is under it. A file under none of them (documentation, the CPU's own kernels) changes none.
section_paths='
kernels/cuda/           test sanitize bench train vit transformer compare mixed
kernels/attention       test transformer vit
kernels/layer_norm      test transformer vit
kernels/embedding       test
kernels/                test bench
core/cuda/              test sanitize train loader
core/                   test
layers/                 test train vit compare
optim/                  test train compare
train/                  test train vit compare mixed devices distributed
data/                   test train loader
distributed/            test distributed
base/                   test
extension               test
examples/               test
tests/cuda/             test sanitize
tests/                  test
CMakeLists.txt          test
cmake/                  test
apps/mnist_train.cpp    train vit compare mixed
apps/common/            train vit compare mixed distributed
apps/bench_kernels.cpp  bench transformer
apps/bench/             bench transformer
apps/bench_loader.cpp   loader
apps/bench_devices.cpp  devices
scripts/compare/transformer.py      transformer
scripts/compare/mixed_precision.py  compare mixed
scripts/compare_pytorch.py          compare
scripts/gpu_check/setup.sh          test
scripts/gpu_check/correctness.sh    test train vit sanitize
scripts/gpu_check/figures.sh        transformer bench compare mixed loader devices distributed
'
ledger=$root/docs/results/gpu-checks.md
base=$(awk '/^## Runs/ { runs = 1; next } /^## / { runs = 0 } runs && /^\| 20/ { split($0, c, "|"); last = c[3] }
            END { gsub(/[` ]/, "", last); print last }' "$ledger")
{
  if [ -n "$base" ] && git -C "$root" rev-parse --verify -q "$base^{commit}" >/dev/null; then
    mapfile -t paths < <({ git -C "$root" diff --name-only "$base" HEAD; git -C "$root" status --porcelain |
      cut -c4-; } | sort -u)
    declare -A hit=()
    for path in "${paths[@]}"; do
      while read -r prefix sections; do
        [ -n "$prefix" ] && [[ "$path" == "$prefix"* ]] && for s in $sections; do hit[$s]=1; done
      done <<<"$section_paths"
    done
    echo "base: $base (the ledger's last run on a GPU), $(git -C "$root" rev-list --count "$base"..HEAD) commits and" \
      "$(git -C "$root" status --porcelain | wc -l) uncommitted paths since"
    echo "changed: ${!hit[*]}"
    echo "commits:"
    git -C "$root" log --format='%h %s' "$base"..HEAD
  else
    echo "base: unknown (no commit '$base' of the ledger's Runs table in this history)"
    echo "changed: test train vit transformer bench sanitize compare mixed loader devices distributed"
    echo "commits:"
  fi
} >"$root/.deps/gpu_check_plan.txt"
echo "prepare: plan in .deps/gpu_check_plan.txt: $(grep -m1 '^base:' "$root/.deps/gpu_check_plan.txt" | cut -c7-);" \
  "$(grep -m1 '^changed:' "$root/.deps/gpu_check_plan.txt")"

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
