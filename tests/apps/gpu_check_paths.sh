#!/usr/bin/env bash
# scripts/gpu_check.sh's paths without a GPU (its --dry-run, the build skipped): every section runs
# its commands (printed), writes its header and status into report.md, and a section given a
# 1-second budget is cut, says "did not finish", and the sections after it still run; the plan's
# order, the call's limit scaling the budgets, and bench's table of every row.
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
for section in facts train vit transformer bench sanitize compare mixed loader devices distributed; do
  if grep -q "^## $section (budget" "$report" && grep -qE "^\| $section \| (PASS|SKIP) \|" "$report"; then
    pass "$section ran its path after the cut and is in the summary"
  else
    fail "$section: $(grep -A3 "^## $section" "$report" | head -4)"
  fi
done
# Each section's own command lines, printed by the dry run where the GPU machine runs them.
for command in "apps/mnist_train --data" "--model vit --epochs 3 --val-size 0 --seed 0 --device cuda" \
  "--model vit --epochs 3 --val-size 0 --seed 0 --device cpu" "transformer.py --bench" \
  "apps/bench_kernels --device cuda" "compare_pytorch.py --device cuda" "--models 512-256,32 --torch-modes compile" \
  "mixed_precision.py --device cuda" "--models cnn --rounds 1 --epochs 3 --batch-size 64" "--batch-size 256" \
  "PyTorch compile + bf16 autocast" "apps/bench_loader" "apps/bench_devices" \
  "compute-sanitizer --tool memcheck --kernel-name kns=ember" "compute-sanitizer --tool racecheck" "limit "; do
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
grep -q "^- sizes: small (full at a budget of 300 s or more; this one is 150 s)" "$report" &&
  pass "the sanitizers' sizes, chosen by the budget, are in the report" || fail "sanitize: no sizes line"
# The plan: the changed sections first, after facts and build, in the default order among them.
printf 'base: 0000000 (test)\nchanged: devices loader\ncommits:\n0000000 a commit\n' >"$work/plan.txt"
order=$(GPU_CHECK_PLAN=$work/plan.txt bash "$root/scripts/gpu_check.sh" --list | cut -d' ' -f1 | tr '\n' ' ')
[[ "$order" == "facts build stubborn loader devices test train vit "* ]] &&
  pass "changed sections first: $order" || fail "order with loader and devices changed: $order"
GPU_CHECK_PLAN=$work/plan.txt OUT=$work/plan bash "$root/scripts/gpu_check.sh" --dry-run --only loader >/dev/null 2>&1
grep -q "^- 0000000 a commit" "$work/plan/report.md" && grep -q "^## loader (budget 15 s; .*; changed)" "$work/plan/report.md" &&
  pass "the report lists the commits since the last GPU run and marks the changed sections" ||
  fail "plan in the report: $(head -12 "$work/plan/report.md")"
# The call's limit: a 300-s call halves every budget but facts' and build's; --budget stays as given.
budgets=$(bash "$root/scripts/gpu_check.sh" --deadline 300 --budget bench=75 --list | tr '\n' ' ')
[[ "$budgets" == *"facts (budget 20 s)"* && "$budgets" == *"test (budget 60 s)"* &&
  "$budgets" == *"bench (budget 75 s)"* && "$budgets" == *"build (budget 150 s)"* ]] &&
  pass "--deadline 300 scales the budgets: $budgets" || fail "--deadline 300: $budgets"
# bench's compact table keeps every row of the JSON, refused ones with their reason.
cat >"$work/bench.json" <<'JSON'
{"ceilings": [{"device": "cuda:0", "copy_gb_per_s": 4000.0, "copy": "cudaMemcpy", "gemm_gflop_per_s": 50000.0,
  "gemm": "cublasSgemm"}],
 "results": [{"family": "fill", "version": "v", "shape": "1M", "in_use": true, "status": "ok", "time_us": 1.5,
  "gb_per_s": 2000.0, "fraction_of_ceiling": 0.5},
  {"family": "gemm", "version": "w", "shape": "4096^3", "in_use": false, "status": "ok", "time_us": 2.0,
  "gb_per_s": 1.0, "gflop_per_s": 40000.0, "fraction_of_ceiling": 0.8},
  {"family": "softmax_forward", "version": "x", "shape": "6.7M x 10", "in_use": true, "status": "refused",
  "reason": "wrong result: 1 > 0"}]}
JSON
table=$(python3 "$root/scripts/gpu_check/bench_table.py" "$work/bench.json")
[ "$(grep -c '^| [a-z_]* | [a-z] | ' <<<"$table")" = 3 ] && grep -q "| fill | v | 1M | 1.50 | 2,000.0 |  | 50% | yes |" <<<"$table" &&
  grep -q "REFUSED: wrong result: 1 > 0" <<<"$table" && pass "bench_table.py keeps every row" ||
  fail "bench table: $table"
OUT=$work/bad bash "$root/scripts/gpu_check.sh" --budget nosuch=3 >"$work/bad.txt" 2>&1
[ $? = 2 ] && grep -q "budget takes SECTION=SECONDS" "$work/bad.txt" && pass "--budget names what it takes" ||
  fail "--budget nosuch=3: $(cat "$work/bad.txt")"
echo "gpu_check_paths: $failures failure(s)"
[ $failures = 0 ]
