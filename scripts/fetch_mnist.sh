#!/usr/bin/env bash
# Puts the four MNIST files into DIR: downloads them from a public mirror and verifies their
# published MD5 checksums, or copies an existing local copy with --from. Each file is written
# under a temporary name and renamed once complete.
#   scripts/fetch_mnist.sh DIR                (download; fails clearly when offline)
#   scripts/fetch_mnist.sh DIR --from DIR2    (copy DIR2's files; no network)
#   scripts/fetch_mnist.sh DIR --if-missing   (nothing when DIR already has the four files)
set -euo pipefail
usage="usage: scripts/fetch_mnist.sh DIR [--from DIR2 | --if-missing]"
dir=${1:?$usage}
from="" if_missing=0
case "${2:-}" in
  --from) from=${3:?--from needs a folder} ;;
  --if-missing) if_missing=1 ;;
  "") ;;
  *) echo "fetch_mnist: unknown option '$2' ($usage)" >&2; exit 2 ;;
esac

files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
# The checksums published with the dataset (and used by torchvision).
declare -A md5=(
  [train-images-idx3-ubyte.gz]=f68b3c2dcbeaaa9fbdd348bbdeb94873
  [train-labels-idx1-ubyte.gz]=d53e105ee54ea40749a09fcbcd1e9432
  [t10k-images-idx3-ubyte.gz]=9fb629c4189551a2d022fa330f9573f3
  [t10k-labels-idx1-ubyte.gz]=ec29112dd5afa0611ce80d1b7f02629c
)
# EMBER_MNIST_MIRRORS="URL ..." replaces the mirrors (the tests point it at a closed port).
read -r -a mirrors <<<"${EMBER_MNIST_MIRRORS:-https://ossci-datasets.s3.amazonaws.com/mnist https://storage.googleapis.com/cvdf-datasets/mnist}"
# A file is present with or without .gz (the programs read both).
present() { [ -f "$dir/$1" ] || [ -f "$dir/${1%.gz}" ]; }
if [ $if_missing = 1 ]; then
  missing=0
  for f in "${files[@]}"; do present "$f" || missing=1; done
  [ $missing = 1 ] || exit 0
fi
mkdir -p "$dir"

if [ -n "$from" ]; then
  for f in "${files[@]}"; do
    src=""
    for candidate in "$from/$f" "$from/${f%.gz}"; do [ -f "$candidate" ] && src=$candidate && break; done
    [ -n "$src" ] || { echo "fetch_mnist: $from has neither $f nor ${f%.gz}" >&2; exit 2; }
    cp "$src" "$dir/$(basename "$src").part"
    mv "$dir/$(basename "$src").part" "$dir/$(basename "$src")"
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
  if ! command -v curl >/dev/null; then
    echo "fetch_mnist: curl is needed to download $f (apt-get install curl), or copy a local copy:" >&2
    echo "  scripts/fetch_mnist.sh $dir --from /path/to/mnist   (or set MNIST_DIR=/path/to/mnist)" >&2
    exit 1
  fi
  ok=0
  for mirror in "${mirrors[@]}"; do
    if curl -fsSL --connect-timeout 10 --retry 2 -o "$dir/$f.part" "$mirror/$f"; then ok=1; break; fi
  done
  if [ $ok = 0 ]; then
    rm -f "$dir/$f.part"
    echo "fetch_mnist: could not download $f from ${mirrors[*]} (offline?). Copy a local copy instead:" >&2
    echo "  scripts/fetch_mnist.sh $dir --from /path/to/mnist   (or set MNIST_DIR=/path/to/mnist)" >&2
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
