#!/usr/bin/env bash
# Compiler launcher for CUDA sources: runs the nvcc command it is given (which asks ptxas for
# -v, so each kernel's registers and spills appear in the build log) and fails the compile when a
# kernel spills registers to local memory, unless its source says why it may with a comment
#   // may-spill: <kernel_name> <reason>
set -u
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2>"$log"
status=$?
cat "$log" >&2
[ $status -ne 0 ] && exit $status

source_file=""
for arg in "$@"; do
  case "$arg" in *.cu) source_file="$arg" ;; esac
done

failed=0
current=""
while IFS= read -r line; do
  case "$line" in
    *"Compiling entry function '"*)
      current=${line#*Compiling entry function \'}
      current=${current%%\'*}
      ;;
    *"bytes spill stores"*)
      stores=$(sed -E 's/.* ([0-9]+) bytes spill stores.*/\1/' <<<"$line")
      loads=$(sed -E 's/.* ([0-9]+) bytes spill loads.*/\1/' <<<"$line")
      if [ "${stores:-0}" != 0 ] || [ "${loads:-0}" != 0 ]; then
        allowed=0
        if [ -n "$source_file" ]; then
          while read -r name; do
            [ -n "$name" ] && [[ "$current" == *"$name"* ]] && allowed=1
          done < <(sed -nE 's#.*// may-spill: ([A-Za-z0-9_]+).*#\1#p' "$source_file")
        fi
        if [ $allowed = 0 ]; then
          echo "error: kernel $current in $source_file spills registers ($stores bytes stored, $loads loaded)." >&2
          echo "       Reduce its register use, or add '// may-spill: <kernel_name> <why>' at the kernel." >&2
          failed=1
        fi
      fi
      ;;
  esac
done <"$log"
exit $failed
