#!/usr/bin/env bash
# The full GPU check: on a Linux machine with an NVIDIA GPU, the CUDA toolkit and Python with
# PyTorch, but no package registry (run scripts/prepare_gpu_check.sh beforehand where there is
# one). Prints the machine's facts, builds Release for sm_90 against the unpacked .deps, runs
# every test including the GPU binary, runs compute-sanitizer on the GPU binary, and writes a
# report and logs under $OUT (or ./gpu-report), with a summary table printed last.
#
#   scripts/gpu_check.sh [--dry-run] [--only SECTION[,SECTION...]] [--list]
#
# --dry-run does everything up to running on a GPU: unpacks .deps and configures and builds
# against it exactly as the GPU machine will. CI runs it, so a broken device build shows there.
# Sections run in order, each within its time budget; the whole run stays under 6 minutes.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# name:budget-seconds, in order
# The budgets add up to 6 minutes.
all_sections=(facts:10 build:90 test:50 sanitize:40 train:45 compare:45 mixed:30 loader:15 bench:30 devices:15 distributed:20)
dry_run=0
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --only) only=${2:-}; shift ;;
    --only=*) only=${1#--only=} ;;
    --list) for s in "${all_sections[@]}"; do echo "${s%%:*} (budget ${s##*:} s)"; done; exit 0 ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for s in ${only//,/ }; do
  printf '%s\n' "${all_sections[@]}" | grep -q "^$s:" || { echo "gpu_check: unknown section '$s' (see --list)" >&2; exit 2; }
done

out=${OUT:-$root/gpu-report}
mkdir -p "$out"
deps=$root/.deps/root
build=$root/build-gpu$([ $dry_run = 1 ] && echo -dryrun)
jobs=$(nproc)
started=$(date +%s)
declare -a summary=()

log() { echo "[gpu_check $(($(date +%s) - started))s] $*"; }
record() { summary+=("$(printf '%-9s %-5s %5ss  %s' "$1" "$2" "$3" "$4")"); }
wanted() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }

# Runs a section function under its time budget; the function prints its own log lines and
# sets NOTE. Status: PASS, FAIL or SKIP (function returns 0, 1, 3); TIMEOUT when over budget.
run_section() {
  local name=$1 budget=$2 t0 status rc
  t0=$(date +%s)
  NOTE=""
  log "section $name (budget ${budget}s)"
  "section_$name" "$budget"
  rc=$?
  case $rc in
    0) status=PASS ;;
    3) status=SKIP ;;
    124) status=TIMEOUT ;;
    *) status=FAIL ;;
  esac
  record "$name" "$status" "$(($(date +%s) - t0))" "$NOTE"
}

# ---- facts -------------------------------------------------------------------------------------
find_cudnn() {
  local dir
  for dir in /usr/local/cuda/include /usr/include $(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__) + "/include")' 2>/dev/null); do
    if [ -f "$dir/cudnn_version.h" ]; then
      local v
      v=$(awk '/#define CUDNN_MAJOR/{a=$3}/#define CUDNN_MINOR/{b=$3}/#define CUDNN_PATCHLEVEL/{c=$3}END{print a"."b"."c}' "$dir/cudnn_version.h")
      echo "$v at $dir"
      return
    fi
  done
  echo "not found"
}

# NCCL: the toolkit's, else a Python environment's nvidia/nccl package (the root for EMBER_NCCL_ROOT).
find_nccl_root() {
  [ -f /usr/local/cuda/include/nccl.h ] && { echo /usr/local/cuda; return; }
  python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true
}

section_facts() {
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || cat .deps/commit 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "host: $(uname -srm), $(nproc) cores"
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
    else
      echo "gpu: nvidia-smi not found"
    fi
    echo "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo 'not on PATH')"
    echo "cublas: $(ls /usr/local/cuda/lib64/libcublas.so* 2>/dev/null | head -1 || echo 'not in /usr/local/cuda')"
    echo "cudnn: $(find_cudnn)"
    echo "nccl: $(find_nccl_root | grep . || echo 'not found')"
    echo "mpi: $(mpirun --version 2>/dev/null | head -1 | grep . || echo 'not found (distributed tests run a world of one)')"
    echo "compute-sanitizer: $(compute-sanitizer --version 2>/dev/null | head -1 || echo 'not found')"
    echo "cmake: $(cmake --version | head -1)"
    echo "c++: $(c++ --version | head -1)"
    echo "python3: $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"
  } | tee "$out/facts.txt"
  NOTE=$(grep '^gpu:' "$out/facts.txt" | head -1 | cut -c6-)
  return 0
}

# ---- build -------------------------------------------------------------------------------------
unpack_deps() {
  [ -d .deps/debs ] || { echo "no .deps/debs: run scripts/prepare_gpu_check.sh first (where a registry is reachable)"; return 1; }
  mkdir -p "$deps"
  local deb
  for deb in .deps/debs/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$deps" || return 1
    else  # no dpkg: a .deb is an ar archive holding data.tar.*
      (tmp=$(mktemp -d) && cd "$tmp" && ar x "$root/$deb" && tar -xf data.tar.* -C "$deps" && rm -rf "$tmp") || return 1
    fi
  done
  echo "unpacked $(ls .deps/debs/*.deb | wc -l) packages into .deps/root"
}

# Every dependency must come from .deps, as it will on the GPU machine, not from this system.
check_deps_used() {
  local key value bad=0
  for key in Catch2_DIR CLI11_DIR nlohmann_json_DIR ZLIB_INCLUDE_DIR EMBER_OPENBLAS_LIBRARY EMBER_STB_INCLUDE_DIR \
    OPENSSL_CRYPTO_LIBRARY; do
    value=$(grep "^$key:" "$build/CMakeCache.txt" | cut -d= -f2-)
    case "$value" in
      "$deps"/*) echo "dependency $key = $value" ;;
      *) echo "dependency $key = $value is NOT from .deps"; bad=1 ;;
    esac
  done
  return $bad
}

section_build() {
  local budget=$1 generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  unpack_deps >"$out/build.log" 2>&1 || { NOTE="unpacking .deps failed"; cat "$out/build.log"; return 1; }
  timeout "$budget" bash -c '
    cmake -S "$0" -B "$1" "${@:3}" &&
    cmake --build "$1" -j "$2"' "$root" "$build" "$jobs" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DEMBER_CUDA=ON \
    -DEMBER_DEPS_ROOT="$deps" -DCMAKE_PREFIX_PATH="$deps/usr" -DEMBER_NCCL_ROOT="$(find_nccl_root)" \
    >>"$out/build.log" 2>&1
  local rc=$?
  grep -E "ember: |error|Error" "$out/build.log" | grep -v "ptxas info" | head -20
  if [ $rc -ne 0 ]; then
    NOTE="build failed (rc $rc; build.log)"
    tail -30 "$out/build.log"
    return $rc
  fi
  check_deps_used | tee -a "$out/build.log" || { NOTE="dependencies not taken from .deps"; return 1; }
  NOTE="Release, sm_90, $(grep -c 'bytes spill stores' "$out/build.log") kernels compiled without spills"
  return 0
}

# ---- test --------------------------------------------------------------------------------------
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:$deps/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MNIST_DIR=${MNIST_DIR:-$root/data/mnist}
# The CNN with its default recipe (docs/results/cnn.md): 5 epochs on the 10,000-image training prefix.
CNN_ARGS=${CNN_ARGS:-"--epochs 5 --val-size 0"}

section_test() {
  local budget=$1
  [ -x "$build/tests/test_cuda" ] || { NOTE="not built"; return 1; }
  (cd "$build" && timeout "$budget" ctest --output-on-failure -j 4) >"$out/test.log" 2>&1
  local rc=$?
  tail -25 "$out/test.log"
  # On a GPU machine the GPU tests must run, not skip.
  if grep -qE "_cuda .*Skipped" "$out/test.log"; then
    NOTE="the GPU test binary was skipped: $(grep -m1 'skipped:' "$out/test.log")"
    return 1
  fi
  NOTE=$(grep -E "tests passed" "$out/test.log" | tail -1)
  return $rc
}

# ---- sanitize ----------------------------------------------------------------------------------
section_sanitize() {
  local budget=$1 rc=0 tool
  command -v compute-sanitizer >/dev/null || { NOTE="compute-sanitizer not found"; return 3; }
  [ -x "$build/tests/test_cuda" ] || { NOTE="not built"; return 1; }
  : >"$out/sanitize.log"
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool" >>"$out/sanitize.log"
    EMBER_TEST_SIZES=small timeout $((budget / 2)) compute-sanitizer --tool "$tool" --error-exitcode 99 \
      "$build/tests/test_cuda" >>"$out/sanitize.log" 2>&1
    local r=$?
    echo "== $tool exit $r" >>"$out/sanitize.log"
    [ $r -ne 0 ] && rc=$r
  done
  grep -E "^== |ERROR SUMMARY|RACECHECK SUMMARY|test cases" "$out/sanitize.log"
  NOTE=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitize.log" | tr '\n' ' ')
  return $rc
}

# ---- train -------------------------------------------------------------------------------------
# MNIST on the GPU and on the CPU with the same settings: the accuracies must agree within a point.
section_train() {
  local budget=$1
  [ -f "$MNIST_DIR/train-images-idx3-ubyte.gz" ] || { NOTE="no MNIST files in $MNIST_DIR"; return 3; }
  local args=(--data "$MNIST_DIR" --epochs 10 --lr 0.1 --val-size 0 --hidden 32)
  : >"$out/train.log"
  local dev
  for dev in cuda cpu; do
    echo "== mnist_train --device $dev" >>"$out/train.log"
    timeout $((budget / 2)) "$build/apps/mnist_train" "${args[@]}" --device "$dev" --json-log "$out/train-$dev.jsonl" \
      >>"$out/train.log" 2>&1 || { NOTE="mnist_train --device $dev failed"; tail -5 "$out/train.log"; return 1; }
  done
  grep -E "^(== |training step|Epoch \[9\]|test_)" "$out/train.log"
  local acc_gpu acc_cpu ips_gpu ips_cpu
  acc_gpu=$(grep -o '"test_acc":[0-9.]*' "$out/train-cuda.jsonl" | cut -d: -f2)
  acc_cpu=$(grep -o '"test_acc":[0-9.]*' "$out/train-cpu.jsonl" | cut -d: -f2)
  ips_gpu=$(grep -o '"images_per_s":[0-9.]*' "$out/train-cuda.jsonl" | tail -1 | cut -d: -f2)
  ips_cpu=$(grep -o '"images_per_s":[0-9.]*' "$out/train-cpu.jsonl" | tail -1 | cut -d: -f2)
  rm -f "$out/train-cuda.jsonl" "$out/train-cpu.jsonl"
  # The CNN on CUDA, with the settings docs/results/cnn.md records for the CPU.
  echo "== mnist_train --model cnn --device cuda" >>"$out/train.log"
  timeout $((budget / 2)) "$build/apps/mnist_train" --data "$MNIST_DIR" --model cnn $CNN_ARGS --device cuda \
    --json-log "$out/train-cnn.jsonl" >>"$out/train.log" 2>&1 || { NOTE="CNN training on cuda failed"; return 1; }
  local acc_cnn
  acc_cnn=$(grep -o '"test_acc":[0-9.]*' "$out/train-cnn.jsonl" | cut -d: -f2)
  rm -f "$out/train-cnn.jsonl"
  NOTE="MLP test accuracy cuda $acc_gpu, cpu $acc_cpu; images/s cuda ${ips_gpu%.*}, cpu ${ips_cpu%.*}; CNN on cuda $acc_cnn"
  awk -v a="$acc_gpu" -v b="$acc_cpu" -v c="$acc_cnn" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01 && c >= 0.98) }'
}

# ---- compare -----------------------------------------------------------------------------------
# ember's fused, graph-replayed MLP step next to PyTorch eager (data preloaded), the tutorials'
# pinned DataLoader and torch.compile, on the same GPU; goal: ≥ 10× PyTorch eager preloaded.
section_compare() {
  local budget=$1
  python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null || { NOTE="no PyTorch with CUDA"; return 3; }
  timeout "$budget" python3 scripts/compare_pytorch.py --device cuda --build "$build" --data "$MNIST_DIR" \
    --models 32,512-256 --epochs 3 --rounds 1 --report "$out/compare.md" >"$out/compare.log" 2>&1
  local rc=$?
  cat "$out/compare.log"
  NOTE="ember graph / PyTorch preloaded: $(grep '^| 784' "$out/compare.md" 2>/dev/null | awk -F'|' '{printf "%s ×%s (streaming cost %s); ", $2, $10, $13}')"
  rm -f "$out/compare.md"  # the table is in the log too; few files come back from the GPU machine
  return $rc
}

# ---- mixed -------------------------------------------------------------------------------------
# Mixed precision on the GPU: the MLP 784-512-256-10 in f32, bf16 and f16 (mnist_train --precision)
# next to PyTorch eager, torch.compile and bf16 autocast, one round (scripts/compare/mixed_precision.py).
section_mixed() {
  local budget=$1
  python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null || { NOTE="no PyTorch with CUDA"; return 3; }
  timeout "$budget" python3 scripts/compare/mixed_precision.py --device cuda --train "$build/apps/mnist_train" \
    --data "$MNIST_DIR" --python python3 --models mlp --rounds 1 --epochs 3 >"$out/mixed.log" 2>&1
  local rc=$?
  cat "$out/mixed.log"
  NOTE="$(grep -E '^\| (ember bf16|PyTorch bf16 autocast) ' "$out/mixed.log" | awk -F'|' '{printf "%s %s/s; ", $2, $3}')"
  return $rc
}

# ---- loader ------------------------------------------------------------------------------------
section_loader() {
  local budget=$1
  [ -f "$MNIST_DIR/train-images-idx3-ubyte.gz" ] || { NOTE="no MNIST files in $MNIST_DIR"; return 3; }
  timeout "$budget" "$build/apps/bench_loader" --data "$MNIST_DIR" --device cuda --epochs 5 >"$out/loader.log" 2>&1
  local rc=$?
  cat "$out/loader.log"
  NOTE=$(grep "copy hidden" "$out/loader.log" | tr -s ' ' | cut -c1-120)
  return $rc
}

# ---- bench -------------------------------------------------------------------------------------
# Every kernel family on the GPU, at 1M and 64M elements (256 MB of f32), against the measured
# device-to-device copy and cuBLAS SGEMM; plus host-device copies and launch overhead.
section_bench() {
  local budget=$1
  timeout "$budget" "$build/apps/bench_kernels" --device cuda --sizes 1048576,67108864 --repeat 10 \
    --json "$out/bench.json" >"$out/bench.log" 2>&1
  local rc=$?
  cat "$out/bench.log"
  local refused
  refused=$(grep -c "REFUSED" "$out/bench.log")
  NOTE="$(grep -c '(in use)' "$out/bench.log") timed, $refused refused; $(grep -m1 '^== ' "$out/bench.log" | cut -c4-120)"
  [ "$refused" = 0 ] || return 1
  return $rc
}

# ---- devices -----------------------------------------------------------------------------------
# When does the GPU help: the same training steps on the CPU and the GPU across model sizes.
section_devices() {
  local budget=$1
  timeout "$budget" "$build/apps/bench_devices" --steps 20 --cpu-budget 1.5 --threads "$(nproc)" \
    --json "$out/devices.json" --plot "$out/devices.svg" >"$out/devices.log" 2>&1
  local rc=$?
  cat "$out/devices.log"
  NOTE="speedup $(grep -E '^(MLP 784-32-10|CNN 64-128-256)' "$out/devices.log" | awk '{print $NF}' | tr '\n' ' ')(smallest MLP, largest CNN)"
  return $rc
}

# ---- distributed -------------------------------------------------------------------------------
# Two GPUs with mpirun: 2 ranks × 64 against one GPU with 2 micro-batches of 64 (the same
# arithmetic: the parameters' hashes after each epoch should agree). One GPU is covered by
# test_cuda's one-rank NCCL tests.
section_distributed() {
  local budget=$1 gpus
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  command -v mpirun >/dev/null || { NOTE="no mpirun here: one-rank NCCL tests only (test section)"; return 3; }
  [ "$gpus" -ge 2 ] || { NOTE="$gpus GPU: one-rank NCCL tests only (test section)"; return 3; }
  [ -f "$MNIST_DIR/train-images-idx3-ubyte.gz" ] || { NOTE="no MNIST files in $MNIST_DIR"; return 3; }
  local args=(--data "$MNIST_DIR" --epochs 2 --val-size 7952 --hidden 128 --log-step-losses)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  timeout $((budget / 2)) mpirun -np 2 --bind-to none "$build/apps/mnist_train" --distributed "${args[@]}" \
    --batch-size 64 --json-log "$out/dist-2.jsonl" >"$out/distributed.log" 2>&1 || { NOTE="2-GPU run failed"; return 1; }
  timeout $((budget / 2)) "$build/apps/mnist_train" "${args[@]}" --device cuda --batch-size 128 --micro-batches 2 \
    --json-log "$out/dist-1.jsonl" >>"$out/distributed.log" 2>&1 || { NOTE="micro-batch run failed"; return 1; }
  local two one
  two=$(grep -o '"params_hash":"[0-9a-f]*"' "$out/dist-2.jsonl" | tr '\n' ' ')
  one=$(grep -o '"params_hash":"[0-9a-f]*"' "$out/dist-1.jsonl" | tr '\n' ' ')
  grep -E "^(distributed|Epoch|test_)" "$out/distributed.log"
  rm -f "$out/dist-2.jsonl" "$out/dist-1.jsonl"
  NOTE="2 GPUs: $two; 1 GPU with 2 micro-batches: $one"
  [ "$two" = "$one" ]
}

# ---- main --------------------------------------------------------------------------------------
if [ $dry_run = 1 ]; then
  log "dry run: unpack .deps, configure and build as the GPU machine will; nothing runs on a GPU"
  wanted build || { echo "gpu_check: --dry-run needs the build section" >&2; exit 2; }
  run_section facts 10
  run_section build 1800  # two CI cores build far slower than the GPU machine's
else
  for entry in "${all_sections[@]}"; do
    name=${entry%%:*}
    budget=${entry##*:}
    wanted "$name" && run_section "$name" "$budget"
  done
fi

# At most 8 files come back from the GPU machine: the sections' short logs go into runs.log, the
# facts into the report.
for part in train compare mixed loader bench devices; do
  [ -f "$out/$part.log" ] && { echo "==== $part"; cat "$out/$part.log"; rm -f "$out/$part.log"; } >>"$out/runs.log"
done

{
  echo "# GPU check report"
  echo
  echo '```'
  cat "$out/facts.txt" 2>/dev/null
  echo '```'
  echo
  echo "| section | status | seconds | note |"
  echo "| --- | --- | --- | --- |"
  for line in "${summary[@]}"; do
    read -r name status secs note <<<"$line"
    echo "| $name | $status | ${secs%s} | $note |"
  done
  echo
  echo "Mode: $([ $dry_run = 1 ] && echo 'dry run (no GPU work)' || echo full). Logs: $(cd "$out" && ls | grep -v -e report.md -e facts.txt | tr '\n' ' ')"
} >"$out/report.md"
rm -f "$out/facts.txt"

echo
echo "==== gpu_check summary ($(($(date +%s) - started)) s; report: $out/report.md)"
printf '%-9s %-5s %6s  %s\n' section status time note
printf '%s\n' "${summary[@]}"
printf '%s\n' "${summary[@]}" | grep -qE "^\S+\s+(FAIL|TIMEOUT)" && exit 1
exit 0
