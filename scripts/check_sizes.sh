#!/usr/bin/env bash
# Checks that no source of ember's (C++ and CUDA, outside tests/, sim/tests/, examples/ and third_party/) is
# longer than LIMIT lines (default 500), except those scripts/size_exceptions.txt lists with a
# reason; a listed file that is back under the limit must leave the list. The first reads — the
# programs a newcomer is sent to and reads whole — have tighter limits of their own (FIRST_READ, if
# given, replaces them all). Prints each violation; exits 1 if any.
#   scripts/check_sizes.sh [ROOT [LIMIT [FIRST_READ]]]
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
limit=${2:-500}
first_reads=("apps/mnist_train.cpp 350" "examples/mnist_mlp/main.cpp 60")
cd "$root" || exit 2
exceptions=scripts/size_exceptions.txt
declare -A listed=()
while read -r path _; do
  case "$path" in "" | "#"*) continue ;; esac
  listed[$path]=1
done <"$exceptions"
status=0
while IFS= read -r file; do
  lines=$(wc -l <"$file")
  if [ "$lines" -gt "$limit" ] && [ -z "${listed[$file]:-}" ]; then
    echo "check_sizes: $file has $lines lines, over $limit: split it, or list it in $exceptions with the reason"
    status=1
  elif [ "$lines" -le "$limit" ] && [ -n "${listed[$file]:-}" ]; then
    echo "check_sizes: $file has $lines lines, within $limit: remove it from $exceptions"
    status=1
  fi
done < <(find . \( -path ./tests -o -path ./sim/tests -o -path ./examples -o -path ./third_party -o -path './build*' \
                  -o -path './install*' -o -path ./.venv -o -path ./.deps -o -path ./.git -o -path ./gpu-report \) -prune \
              -o -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print | sed 's|^\./||' | sort)
for entry in "${first_reads[@]}"; do
  read -r file most <<<"$entry"
  most=${3:-$most}
  lines=$(wc -l <"$file")
  if [ "$lines" -gt "$most" ]; then
    echo "check_sizes: $file has $lines lines, over its first-read limit of $most: move what is not the program's own into the library"
    status=1
  fi
done
for path in "${!listed[@]}"; do
  [ -f "$path" ] || { echo "check_sizes: $exceptions lists $path, which does not exist"; status=1; }
done
[ $status = 0 ] && echo "check_sizes: every source within $limit lines, or listed (${#listed[@]} listed)"
exit $status
