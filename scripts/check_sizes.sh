#!/usr/bin/env bash
# Checks that no source of ember's (C++ and CUDA: *.cpp *.h *.cu *.cuh) is longer than its limit:
# a library source (outside tests/, sim/tests/, examples/ and third_party/) LIMIT lines (default
# 450), a test source (under tests/ or sim/tests/) TEST_LIMIT lines (default 600) — except those
# scripts/size_exceptions.txt lists, each with the reason and what would end it; a listed file that
# is back within its limit must leave the list. The first reads — the programs a newcomer is sent
# to and reads whole — have tighter limits of their own (FIRST_READ, if given, replaces them all).
# An empty argument keeps its default (`check_sizes.sh ROOT "" "" 300` lowers the test limit
# alone). Prints each violation; exits 1 if any.
#   scripts/check_sizes.sh [ROOT [LIMIT [FIRST_READ [TEST_LIMIT]]]]
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
limit=${2:-450}
test_limit=${4:-600}
first_reads=("apps/mnist_train.cpp 350" "examples/mnist_mlp/main.cpp 60")
cd "$root" || exit 2
exceptions=scripts/size_exceptions.txt
declare -A listed=()
while read -r path _; do
  case "$path" in "" | "#"*) continue ;; esac
  listed[$path]=1
done <"$exceptions"
status=0
# check KIND MOST FILE...: each file against MOST lines (KIND names the limit in the message).
check() {
  local kind=$1 most=$2 file lines
  shift 2
  for file in "$@"; do
    lines=$(wc -l <"$file")
    if [ "$lines" -gt "$most" ] && [ -z "${listed[$file]:-}" ]; then
      echo "check_sizes: $file has $lines lines, over $most ($kind): split it, or list it in $exceptions with the reason"
      status=1
    elif [ "$lines" -le "$most" ] && [ -n "${listed[$file]:-}" ]; then
      echo "check_sizes: $file has $lines lines, within $most ($kind): remove it from $exceptions"
      status=1
    fi
  done
}
sources=(-type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print)
mapfile -t library < <(find . \( -path ./tests -o -path ./sim/tests -o -path ./examples -o -path ./third_party \
                                 -o -path './build*' -o -path './install*' -o -path ./.venv -o -path ./.deps \
                                 -o -path ./.git -o -path ./gpu-report \) -prune -o "${sources[@]}" |
                         sed 's|^\./||' | sort)
mapfile -t tests < <(find tests sim/tests "${sources[@]}" | sort)
check "the library's limit" "$limit" "${library[@]}"
check "the tests' limit" "$test_limit" "${tests[@]}"
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
[ $status = 0 ] &&
  echo "check_sizes: every library source within $limit lines, every test source within $test_limit, or listed (${#listed[@]} listed)"
exit $status
