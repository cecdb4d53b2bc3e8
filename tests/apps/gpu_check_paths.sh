#!/usr/bin/env bash
# scripts/gpu_check.sh's paths without a GPU (its --dry-run, the build skipped): every section runs
# its commands (printed), writes its header and status into report.md, and a section given a
# 1-second budget is cut, says "did not finish", and the sections after it still run.
#   gpu_check_paths.sh WORK_DIR
set -u
work=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
source "$root/tests/apps/expect.sh"

OUT=$work/out bash "$root/scripts/gpu_check.sh" --dry-run --skip build --budget test=1 >"$work/stdout.txt" 2>&1
code=$?
report=$work/out/report.md
[ $code = 1 ] && pass "a timed-out section makes the check fail (exit 1)" || fail "exit $code, expected 1"
grep -q "^## test (budget 1 s" "$report" && grep -A2 "^## test (budget 1 s" "$report" | grep -q "did not finish" &&
  pass "the cut section leaves its header and \"did not finish\"" || fail "test section: $(grep -A3 '^## test' "$report")"
for section in facts train bench compare mixed loader devices sanitize distributed; do
  if grep -q "^## $section (budget" "$report" && grep -qE "^\| $section \| (PASS|SKIP) \|" "$report"; then
    pass "$section ran its path after the cut and is in the summary"
  else
    fail "$section: $(grep -A3 "^## $section" "$report" | head -4)"
  fi
done
# Each section's own command lines, printed by the dry run where the GPU machine runs them.
for command in "apps/mnist_train --data" "apps/bench_kernels --device cuda" "compare_pytorch.py --device cuda" \
  "--torch-modes compile" "mixed_precision.py --device cuda" "apps/bench_loader" "apps/bench_devices" \
  "compute-sanitizer --tool memcheck --kernel-name kns=ember" "compute-sanitizer --tool racecheck"; do
  grep -rqF -- "$command" "$work/out" && pass "printed: $command" || fail "not printed: $command"
done
grep -q "^## build" "$report" && fail "--skip build still ran the build" || pass "--skip leaves a section out"
# A driver older than the toolkit: a stand-in nvidia-smi reports CUDA 12.4 beside this machine's
# nvcc 13 (and no older toolkit): the check stops at once and says which, and runs nothing more.
if command -v nvcc >/dev/null && [ "$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')" -ge 13 ] &&
  ! ls /usr/local/cuda-1[0-2]*/bin/nvcc >/dev/null 2>&1; then
  mkdir -p "$work/bin"
  printf '#!/bin/sh\necho "| NVIDIA-SMI 550.54   Driver Version: 550.54   CUDA Version: 12.4 |"\n' >"$work/bin/nvidia-smi"
  chmod +x "$work/bin/nvidia-smi"
  PATH=$work/bin:$PATH OUT=$work/old bash "$root/scripts/gpu_check.sh" --dry-run --skip build >"$work/old.txt" 2>&1
  if grep -q "STOP: the driver runs CUDA 12.4 code at most, and no installed toolkit is that old" "$work/old/report.md" &&
    grep -q "^## test: not run (the facts section stopped the check)" "$work/old/report.md"; then
    pass "a driver older than every toolkit stops the check, naming both versions"
  else
    fail "old driver: $(grep -A2 '^## facts\|STOP\|## test' "$work/old/report.md" | head -8)"
  fi
fi
OUT=$work/bad bash "$root/scripts/gpu_check.sh" --budget nosuch=3 >"$work/bad.txt" 2>&1
[ $? = 2 ] && grep -q "budget takes SECTION=SECONDS" "$work/bad.txt" && pass "--budget names what it takes" ||
  fail "--budget nosuch=3: $(cat "$work/bad.txt")"
echo "gpu_check_paths: $failures failure(s)"
[ $failures = 0 ]
