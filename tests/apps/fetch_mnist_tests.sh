#!/usr/bin/env bash
# scripts/fetch_mnist.sh without the network: the offline case's message (the mirrors pointed at
# a closed port), --from a folder that lacks a file, --from a complete copy, --if-missing, and no
# partial file left behind by any of them.
#   fetch_mnist_tests.sh FETCH_SCRIPT MNIST_DIR WORK_DIR   (MNIST_DIR: a copy to take the files from)
set -uo pipefail
fetch=$1 mnist=$2 work=$3
failures=0
check() {  # check NAME CONDITION...
  local name=$1
  shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; failures=$((failures + 1)); fi
}
rm -rf "$work" && mkdir -p "$work"

EMBER_MNIST_MIRRORS=http://127.0.0.1:9 "$fetch" "$work/offline" >"$work/out" 2>"$work/err"
code=$?
check "offline: exit 1" [ $code = 1 ]
check "offline: says it could not download" grep -q "could not download train-images-idx3-ubyte.gz" "$work/err"
check "offline: names --from and MNIST_DIR" grep -q -- "--from .*MNIST_DIR" "$work/err"
check "offline: no partial file" [ -z "$(ls -A "$work/offline")" ]

mkdir -p "$work/incomplete"
"$fetch" "$work/partial" --from "$work/incomplete" 2>"$work/err"
code=$?
check "--from an empty folder: exit 2" [ $code = 2 ]
check "--from an empty folder: names the missing file" grep -q "has neither train-images-idx3-ubyte.gz" "$work/err"

"$fetch" "$work/bad" --frm x 2>"$work/err"
check "an unknown option: exit 2 with the usage" bash -c "[ $? = 2 ] && grep -q usage '$work/err'"

if [ -d "$mnist" ]; then
  "$fetch" "$work/copy" --from "$mnist" >"$work/out" 2>&1
  check "--from a copy: exit 0" [ $? = 0 ]
  check "--from a copy: four files, no temporary ones" [ "$(ls "$work/copy" | grep -vc part)" = 4 ]
  check "--from a copy: no .part file" [ -z "$(ls "$work/copy" | grep part)" ]
  EMBER_MNIST_MIRRORS=http://127.0.0.1:9 "$fetch" "$work/copy" --if-missing >"$work/out" 2>&1
  check "--if-missing with the files present: nothing to do" bash -c "[ $? = 0 ] && [ ! -s '$work/out' ]"
fi
[ $failures = 0 ] || { echo "fetch_mnist_tests: $failures failure(s)"; exit 1; }
