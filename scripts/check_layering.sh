#!/usr/bin/env bash
# Checks the direction of ember's include arrows: apps → train → layers/optim/data → core → kernels.
# kernels/ may use only core/error.h and the generated core/config.h from core/. Nothing outside
# tests/ includes tests/, and nothing but apps/ and its tests include apps/. Prints each violation;
# exits 1 if any.
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2

allowed() {  # allowed <folder of the including file> <included path>
  local from=$1 inc=$2
  case "$inc" in
    apps/*) [ "$from" = apps ] || [ "$from" = tests ] ;;  # tests/apps tests what the programs share
    tests/*) [ "$from" = tests ] ;;
    kernels/*) return 0 ;;
    core/error.h | core/config.h) return 0 ;;
    core/*) [ "$from" != kernels ] ;;
    train/*) [ "$from" = apps ] || [ "$from" = tests ] || [ "$from" = train ] ;;
    layers/* | optim/* | data/*) [ "$from" = apps ] || [ "$from" = tests ] || [ "$from" = train ] || [ "$from" = "${inc%%/*}" ] ;;
    *) return 0 ;;
  esac
}

bad=0
while IFS= read -r file; do
  from=${file%%/*}
  while IFS= read -r inc; do
    if ! allowed "$from" "$inc"; then
      echo "layering: $file includes $inc (arrows point down only: apps → train → layers/optim/data → core → kernels)"
      bad=1
    fi
  done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/p' "$file")
done < <(find apps train layers optim data core kernels tests examples -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | sort)
[ $bad = 0 ] && echo "layering: ok"
exit $bad
