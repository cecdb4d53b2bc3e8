#!/usr/bin/env bash
# Puts the four MNIST files into DIR: downloads them from a public mirror and verifies their
# published MD5 checksums, or copies an existing local copy with --from.
#   scripts/fetch_mnist.sh DIR               (download; fails clearly when offline)
#   scripts/fetch_mnist.sh DIR --from DIR2   (copy DIR2's files; no network)
set -euo pipefail
dir=${1:?usage: scripts/fetch_mnist.sh DIR [--from DIR2]}
from=""
if [ "${2:-}" = "--from" ]; then from=${3:?--from needs a folder}; fi

files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
# The checksums published with the dataset (and used by torchvision).
declare -A md5=(
  [train-images-idx3-ubyte.gz]=f68b3c2dcbeaaa9fbdd348bbdeb94873
  [train-labels-idx1-ubyte.gz]=d53e105ee54ea40749a09fcbcd1e9432
  [t10k-images-idx3-ubyte.gz]=9fb629c4189551a2d022fa330f9573f3
  [t10k-labels-idx1-ubyte.gz]=ec29112dd5afa0611ce80d1b7f02629c
)
mirrors=(https://ossci-datasets.s3.amazonaws.com/mnist https://storage.googleapis.com/cvdf-datasets/mnist)
mkdir -p "$dir"

if [ -n "$from" ]; then
  for f in "${files[@]}"; do
    src=""
    for candidate in "$from/$f" "$from/${f%.gz}"; do [ -f "$candidate" ] && src=$candidate && break; done
    [ -n "$src" ] || { echo "fetch_mnist: $from has neither $f nor ${f%.gz}" >&2; exit 2; }
    cp "$src" "$dir/"
    if [ "$(md5sum "$src" | cut -d' ' -f1)" = "${md5[$f]}" ]; then note="matches the published checksum"
    else note="differs from the published file (a subset or another copy)"; fi
    echo "fetch_mnist: copied $(basename "$src") ($note)"
  done
  exit 0
fi

for f in "${files[@]}"; do
  if [ -f "$dir/$f" ] && [ "$(md5sum "$dir/$f" | cut -d' ' -f1)" = "${md5[$f]}" ]; then
    echo "fetch_mnist: $f already present and verified"
    continue
  fi
  ok=0
  for mirror in "${mirrors[@]}"; do
    if curl -fsSL --connect-timeout 10 --retry 2 -o "$dir/$f.part" "$mirror/$f"; then ok=1; break; fi
  done
  if [ $ok = 0 ]; then
    rm -f "$dir/$f.part"
    echo "fetch_mnist: could not download $f from ${mirrors[*]} (offline?). Copy a local copy instead:" >&2
    echo "  scripts/fetch_mnist.sh $dir --from /path/to/mnist" >&2
    exit 1
  fi
  sum=$(md5sum "$dir/$f.part" | cut -d' ' -f1)
  if [ "$sum" != "${md5[$f]}" ]; then
    rm -f "$dir/$f.part"
    echo "fetch_mnist: $f has MD5 $sum, not the published ${md5[$f]}; refusing it" >&2
    exit 1
  fi
  mv "$dir/$f.part" "$dir/$f"
  echo "fetch_mnist: downloaded and verified $f"
done
