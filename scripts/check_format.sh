#!/usr/bin/env bash
# Checks that every C++ and CUDA source is formatted as .clang-format says (clang-format
# --dry-run -Werror); prints the files that are not. Fix with:
#   clang-format -i $(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' ':!third_party/')
# Then lints every Python file with flake8 (settings in .flake8: 120 columns like .clang-format,
# the default checks); prints what it reports. Run it alone with:
#   flake8 $(git ls-files '*.py' ':!third_party/')
# Then checks that no commit subject after 491dc75 is over 72 characters
# (scripts/check_commit_subjects.sh). Exits 1 if any check fails, 2 if clang-format or flake8 is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format not found (Debian: clang-format)" >&2; exit 2; }
command -v flake8 >/dev/null || { echo "check_format: flake8 not found (Debian: flake8)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' ':!third_party/')  # third_party/ as upstream wrote it
status=0
if clang-format --dry-run -Werror "${files[@]}" 2>/tmp/check_format.$$; then
  echo "check_format: ${#files[@]} files formatted ($(clang-format --version | head -1))"
else
  grep -o '^[^:]*\.\(cpp\|h\|cu\|cuh\):' /tmp/check_format.$$ | sort -u | sed 's/:$//; s/^/check_format: not formatted: /'
  status=1
fi
rm -f /tmp/check_format.$$
mapfile -t py_files < <(git ls-files '*.py' ':!third_party/')
if flake8 "${py_files[@]}" >/tmp/check_format.$$ 2>&1; then
  echo "check_format: ${#py_files[@]} Python files clean (flake8 $(flake8 --version | head -1 | cut -d' ' -f1))"
else
  cat /tmp/check_format.$$
  echo "check_format: flake8 reported $(grep -c ':[0-9]*:[0-9]*: ' /tmp/check_format.$$) problem(s) in the Python files"
  status=1
fi
rm -f /tmp/check_format.$$
scripts/check_commit_subjects.sh || status=1
exit $status
