#!/usr/bin/env bash
# Checks that every C++ and CUDA source is formatted as .clang-format says (clang-format
# --dry-run -Werror); prints the files that are not. Fix with:
#   clang-format -i $(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' ':!third_party/')
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format not found (Debian: clang-format)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' ':!third_party/')  # third_party/ as upstream wrote it
if clang-format --dry-run -Werror "${files[@]}" 2>/tmp/check_format.$$; then
  echo "check_format: ${#files[@]} files formatted ($(clang-format --version | head -1))"
  rm -f /tmp/check_format.$$
else
  grep -o '^[^:]*\.\(cpp\|h\|cu\|cuh\):' /tmp/check_format.$$ | sort -u | sed 's/:$//; s/^/check_format: not formatted: /'
  rm -f /tmp/check_format.$$
  exit 1
fi
