#!/usr/bin/env bash
# The GPU check, made for one call of about 10 minutes on a machine with an NVIDIA GPU, the CUDA
# toolkit and Python with PyTorch but no package registry (scripts/prepare_gpu_check.sh fetches
# .deps and data/mnist beforehand). Sections run in the order of what matters most:
#
#   facts        the GPU, the driver's CUDA version against the toolkit's (the build adapts or stops)
#   build        Release for sm_90 against the unpacked .deps: the library, the GPU tests, 4 programs
#   test         test_cuda, then every *_cuda device test: correctness first
#   train        mnist_train --device cuda: MLP (against the CPU), bf16, the CNN, a stop and resume
#   bench        bench_kernels against the copy and GEMM ceilings (the owed kernel figures)
#   compare      the fused, graph-replayed step next to PyTorch eager; torch.compile after, if time is left
#   mixed        f32, bf16 and f16 next to PyTorch eager and bf16 autocast
#   loader       bench_loader: pinned staging, copies hidden behind compute
#   devices      bench_devices: when the GPU beats the CPU
#   sanitize     compute-sanitizer memcheck and racecheck on test_cuda, ember's kernels only
#   distributed  two GPUs through mpirun (skipped on one)
#
# Each section writes its part of report.md when it starts (a header) and when it ends (status,
# figures), and a comparison's lines as they are measured: a timeout, a kill or a failure keeps
# everything before it, and the report says what did not finish or did not run.
#
#   scripts/gpu_check.sh [--dry-run] [--only S,S] [--skip S,S] [--budget S=SECONDS]... [--deadline SECONDS] [--list]
#
# --dry-run (CI): unpacks .deps and builds exactly as the GPU machine will, then walks every other
# section's path (its command lines, printed instead of run, its report writer, its timeout).
# --budget overrides one section's budget (a second call, or a test: --budget test=1 must leave
# "did not finish"). --deadline: seconds from the start after which no section starts and a running
# one is cut (default 560, for a 600-second call). Output: $OUT (else ./gpu-report), at most 8 files.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# Budgets in seconds, and why each is that size. "est." marks an estimate that this run measures
# and records in the report ("took"), for the next call's budgets.
declare -A budget=(
  [facts]=20         # nvidia-smi, nvcc --version, importing torch (about 5 s)
  [build]=210        # est.: configure plus the library, test_cuda, the device tests and 4 programs on 16 cores
  [test]=200         # test_cuda at full sizes (took 23-28 s), then 5 device tests and install_example (est. 60-90 s: builds the examples with nvcc)
  [train]=70         # five short runs of mnist_train (10,000 images each epoch) and a stop and resume
  [bench]=75         # bench_kernels at 1M and 64M elements, 10 timed repeats per kernel (did not finish in 45 s)
  [compare]=100      # eager rows about 5 s each; torch.compile's cold compile est. 30-60 s per model, so last
  [mixed]=120        # the MLP in 3 precisions on both sides, one round: over 50 s on an H200 (first call)
  [loader]=15        # 5 epochs of streaming, pinned and pageable
  [devices]=25       # 20 steps per model on each device
  [sanitize]=150     # est.: start-up of the tool (measured first), then memcheck and racecheck in halves
  [distributed]=30   # two 2-epoch runs
)
order=(facts build test train bench compare mixed loader devices sanitize distributed)

dry_run=0
only=""
skip=""
deadline=560
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --only) only=${2:-}; shift ;;
    --skip) skip=${2:-}; shift ;;
    --deadline) deadline=${2:-}; shift ;;
    --budget)
      entry=${2:-}
      shift
      [[ "$entry" =~ ^([a-z]+)=([0-9]+)$ ]] && [ -n "${budget[${BASH_REMATCH[1]}]:-}" ] ||
        { echo "gpu_check: --budget takes SECTION=SECONDS with a section of --list, not '$entry'" >&2; exit 2; }
      budget[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
      ;;
    --list) for s in "${order[@]}"; do echo "$s (budget ${budget[$s]} s)"; done; exit 0 ;;
    -h | --help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for s in ${only//,/ } ${skip//,/ }; do
  [ -n "${budget[$s]:-}" ] || { echo "gpu_check: unknown section '$s' (see --list)" >&2; exit 2; }
done
[[ "$deadline" =~ ^[0-9]+$ ]] || { echo "gpu_check: --deadline takes seconds, not '$deadline'" >&2; exit 2; }

out=${OUT:-$root/gpu-report}
mkdir -p "$out"
report=$out/report.md
runs=$out/runs.log   # every section's short output; the build, the tests and the sanitizer have their own logs
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
deps=$root/.deps/root
build=$root/build-gpu$([ $dry_run = 1 ] && echo -dryrun)
jobs=$(nproc)
started=$(date +%s)
: >"$runs"

elapsed() { echo $(($(date +%s) - started)); }
log() { echo "[gpu_check $(elapsed)s] $*"; }
wanted() { { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; } && [[ ",$skip," != *",$1,"* ]]; }
# A line of the report, written at once.
say() { printf '%s\n' "$*" >>"$report"; }
# A section's one-line note, for its status line and the summary table.
note() { printf '%s' "$*" >"$work/note"; }
# A GPU command: run it, or in a dry run print it and take a second (so that a 1-second budget
# times out as a real command would).
gpu() {
  if [ $dry_run = 1 ]; then
    echo "[dry run] $*"
    sleep 1
  else
    "$@"
  fi
}
# The section's own log lines in the report, fenced.
quote() { [ -s "$1" ] && { say '```'; grep -E "${2:-.}" "$1" | head -${3:-40} >>"$report"; say '```'; }; }

# Runs section NAME under its budget, capped by the deadline: its header goes into the report
# first, its status line after. A section over budget is killed with its whole process group.
declare -a summary=()
run_section() {
  local name=$1 b=${budget[$1]} t0 rc status left
  left=$((deadline - $(elapsed)))
  if [ "$left" -lt 5 ]; then
    say "## $name: not run (the ${deadline}-s deadline was reached)"
    summary+=("$name|NOT RUN|0|deadline reached")
    return
  fi
  [ "$b" -gt "$left" ] && b=$left
  say ""
  say "## $name (budget $b s; started at +$(elapsed) s)"
  log "section $name (budget ${b}s)"
  : >"$work/note"
  t0=$(date +%s)
  set -m
  ( "section_$name" "$b" ) &
  local pid=$!
  ( sleep "$b"; kill -TERM -- -"$pid" 2>/dev/null; sleep 3; kill -KILL -- -"$pid" 2>/dev/null ) >/dev/null 2>&1 &
  local watchdog=$!
  set +m
  wait "$pid"
  rc=$?
  kill -- -"$watchdog" 2>/dev/null
  wait "$watchdog" 2>/dev/null
  local took=$(($(date +%s) - t0))
  case $rc in
    0) status=PASS ;;
    3) status=SKIP ;;
    *) if [ "$took" -ge "$b" ]; then status=TIMEOUT; else status=FAIL; fi ;;
  esac
  local text
  text=$(cat "$work/note")
  [ $status = TIMEOUT ] && text="did not finish within its $b s${text:+; $text}"
  say "**$status** in $took s. $text"
  summary+=("$name|$status|$took|$text")
}

# ---- facts -------------------------------------------------------------------------------------
# cuDNN's root (include/ and lib/): the toolkit's, else a Python environment's nvidia/cudnn package.
find_cudnn_root() {
  local dir
  for dir in /usr/local/cuda /usr $(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null); do
    [ -f "$dir/include/cudnn_version.h" ] && { echo "$dir"; return; }
  done
}
find_cudnn() {
  local dir v
  for dir in /usr/local/cuda/include /usr/include /usr/include/x86_64-linux-gnu $(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__) + "/include")' 2>/dev/null); do
    if [ -f "$dir/cudnn_version.h" ]; then
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

nvcc_version() { "$1" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p'; }
# major*100 + minor, for comparing versions.
version_number() { awk -F. '{ print $1 * 100 + $2 }' <<<"$1"; }

# The toolkit to build with: the one on the PATH if the driver runs its code, else another
# installed one that it does (/usr/local/cuda-*), else none. A driver runs code from a toolkit of
# its own CUDA major version or older (within a major version, minor-version compatibility; the
# build is SASS for sm_90, so no PTX has to be compiled by an older driver).
choose_toolkit() {
  local driver=$1 candidate v best="" best_v=0
  for candidate in "$(command -v nvcc)" /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do
    [ -x "$candidate" ] || continue
    v=$(nvcc_version "$candidate")
    [ -n "$v" ] || continue
    [ "${v%%.*}" -le "${driver%%.*}" ] || continue
    if [ "$(version_number "$v")" -gt "$best_v" ]; then best=$candidate; best_v=$(version_number "$v"); fi
  done
  echo "$best"
}

section_facts() {
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || cat .deps/commit 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "host: $(uname -srm), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm --format=csv,noheader 2>&1 |
        sed 's/^/gpu: /'
    else
      echo "gpu: nvidia-smi not found"
    fi
    echo "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo 'not on PATH')"
    echo "cudnn: $(find_cudnn)"
    echo "nccl: $(find_nccl_root | grep . || echo 'not found')"
    echo "mpi: $(mpirun --version 2>/dev/null | head -1 | grep . || echo 'not found')"
    echo "compute-sanitizer: $(compute-sanitizer --version 2>/dev/null | grep -m1 -i version || echo 'not found')"
    echo "cmake: $(cmake --version | head -1); ninja: $(ninja --version 2>/dev/null || echo none)"
    echo "c++: $(c++ --version | head -1)"
    echo "python3: $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"
  } >"$work/facts"
  local driver toolkit chosen
  driver=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\.[0-9]*\).*/\1/p' | head -1)
  toolkit=$(nvcc_version nvcc)
  echo "driver's CUDA version: ${driver:-unknown}; toolkit on the PATH: ${toolkit:-none}" >>"$work/facts"
  say '```'
  cat "$work/facts" >>"$report"
  say '```'
  cat "$work/facts"
  if [ -z "$driver" ]; then
    [ $dry_run = 1 ] && { note "no driver (dry run): building with the toolkit on the PATH"; return 0; }
    note "no NVIDIA driver answered (nvidia-smi): nothing can run on a GPU"
    return 1
  fi
  chosen=$(choose_toolkit "$driver")
  if [ -z "$chosen" ]; then
    note "STOP: the driver runs CUDA $driver code at most, and no installed toolkit is that old (the PATH's is $toolkit): install CUDA ${driver%%.*}.x or a driver for CUDA $toolkit"
    echo stop >"$out/.stop"
    return 1
  fi
  echo "$chosen" >"$work/nvcc"
  note "$(grep -m1 '^gpu:' "$work/facts" | cut -c6-); driver CUDA $driver, building with $chosen (CUDA $(nvcc_version "$chosen"))"
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

# What the GPU sections run: no CPU-only test binary is built here. A dry run (CI) builds the
# library and mnist_train alone: its configure step checks that every dependency comes from .deps,
# and mnist_train links every library the others link; the test binaries' sources compile in CI's
# other builds. The whole list took CI's 2 cores over 5 minutes.
gpu_targets=(test_cuda device_tests mnist_train bench_kernels bench_loader bench_devices)
[ $dry_run = 1 ] && gpu_targets=(mnist_train)

section_build() {
  local generator=() nvcc_path t0
  command -v ninja >/dev/null && generator=(-G Ninja)
  nvcc_path=$(cat "$work/nvcc" 2>/dev/null || command -v nvcc)
  unpack_deps >"$out/build.log" 2>&1 || { note "unpacking .deps failed (build.log)"; return 1; }
  t0=$(date +%s)
  # OpenSSL named outright: on the GPU machine CMake 4's FindOpenSSL took the system's libcrypto
  # over OPENSSL_ROOT_DIR.
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DEMBER_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc_path" -DEMBER_DEPS_ROOT="$deps" -DCMAKE_PREFIX_PATH="$deps/usr" \
    -DEMBER_NCCL_ROOT="$nccl_root" -DEMBER_CUDNN_ROOT="$cudnn_root" \
    -DOPENSSL_CRYPTO_LIBRARY="$deps/usr/lib/x86_64-linux-gnu/libcrypto.so" -DOPENSSL_INCLUDE_DIR="$deps/usr/include" \
    >>"$out/build.log" 2>&1 &&
    cmake --build "$build" -j "$jobs" --target "${gpu_targets[@]}" >>"$out/build.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    note "build failed (rc $rc; build.log)"
    quote "$out/build.log" "error|Error" 20
    return $rc
  fi
  quote "$out/build.log" "^-- ember|ember: |WARNING" 12
  check_deps_used >>"$out/build.log" 2>&1 || { note "dependencies not taken from .deps (build.log)"; return 1; }
  note "Release, sm_90, with $nvcc_path: took $(($(date +%s) - t0)) s on $jobs cores (configure and build of ${gpu_targets[*]})"
}

# ---- test --------------------------------------------------------------------------------------
# cuDNN 9 opens its engine libraries by name, so its folder must be on the path, as NCCL's.
cudnn_root=$(find_cudnn_root)
nccl_root=$(find_nccl_root)
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:$deps/usr/lib/x86_64-linux-gnu/openblas-pthread${cudnn_root:+:$cudnn_root/lib}${nccl_root:+:$nccl_root/lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MNIST_DIR=${MNIST_DIR:-$root/data/mnist}

section_test() {
  local b=$1 rc=0 t0
  [ $dry_run = 1 ] || [ -x "$build/tests/test_cuda" ] || { note "not built"; return 1; }
  # test_cuda first, with each test case's time (the next budgets come from them), at most 70% of
  # the budget so that the device tests run too.
  t0=$(date +%s)
  gpu timeout $((b * 7 / 10)) "$build/tests/test_cuda" --durations yes >"$out/test.log" 2>&1 || rc=$?
  local tail_line
  tail_line=$(grep -E "^(All tests passed|test cases:)" "$out/test.log" | tail -1)
  say "- test_cuda ($(($(date +%s) - t0)) s, exit $rc): ${tail_line:-no summary line}"
  grep -qE "skipped|no usable CUDA" "$out/test.log" && grep -m1 -E "skipped|no usable CUDA" "$out/test.log" | sed 's/^/  - /' >>"$report"
  [ $rc -eq 0 ] || quote "$out/test.log" "FAILED|REQUIRE|CHECK|with expansion|due to unexpected|CUDA error" 40
  # Then the device tests written once per device, on this one, and the extension example built
  # against an installed ember (its own gelu.cu through ember_add_extension, run on this GPU).
  t0=$(date +%s)
  local rc2=0
  echo "==== ctest -R _cuda\$|^install_example\$" >>"$out/test.log"
  (cd "$build" && gpu timeout $((b - $(date +%s) + t0 > 5 ? b - $(date +%s) + t0 : 5)) \
    ctest -R '_cuda$|^install_example$' -E '^test_cuda$' -j 4 --output-on-failure --timeout 180) >>"$out/test.log" 2>&1 || rc2=$?
  local summary_line
  summary_line=$(grep -E "tests passed|tests failed" "$out/test.log" | tail -1)
  say "- device tests ($(($(date +%s) - t0)) s, exit $rc2): ${summary_line:-no summary line}"
  grep -E "^\s+[0-9]+ - .*(Failed|Timeout|Not Run|Skipped)" "$out/test.log" | sed 's/^ */  - /' >>"$report"
  note "test_cuda: ${tail_line:-none}; device tests: ${summary_line:-none}"
  [ $rc -eq 0 ] && [ $rc2 -eq 0 ]
}

# ---- train -------------------------------------------------------------------------------------
# One training run: its test accuracy and last epoch's images/s into the report at once.
train_run() {  # LABEL ARGS...
  local label=$1 t0 rc=0
  shift
  t0=$(date +%s)
  echo "==== mnist_train $*" >>"$runs"
  gpu "$build/apps/mnist_train" --data "$MNIST_DIR" "$@" --json-log "$work/run.jsonl" >>"$runs" 2>&1 || rc=$?
  local acc ips
  acc=$(grep -o '"test_acc":[0-9.]*' "$work/run.jsonl" 2>/dev/null | tail -1 | cut -d: -f2)
  ips=$(grep -o '"images_per_s":[0-9.]*' "$work/run.jsonl" 2>/dev/null | tail -1 | cut -d: -f2)
  rm -f "$work/run.jsonl"
  say "- $label: test accuracy ${acc:-?}, last epoch ${ips%.*} images/s ($(($(date +%s) - t0)) s, exit $rc)"
  echo "${acc:-0}" >"$work/acc-$label"
  return $rc
}

section_train() {
  [ -f "$MNIST_DIR/train-images-idx3-ubyte.gz" ] || { note "no MNIST files in $MNIST_DIR"; return 3; }
  local mlp=(--epochs 10 --lr 0.1 --val-size 0 --hidden 32) rc=0
  train_run mlp-cuda "${mlp[@]}" --device cuda || rc=1
  train_run mlp-cpu "${mlp[@]}" --device cpu || rc=1
  train_run mlp-cuda-bf16 "${mlp[@]}" --device cuda --precision bf16 || rc=1
  train_run cnn-cuda --model cnn --epochs 5 --val-size 0 --device cuda || rc=1
  train_run cnn-cuda-bf16 --model cnn --epochs 2 --val-size 0 --device cuda --precision bf16 || rc=1
  # A stop mid-epoch on the GPU, then the resume: the bytes must equal an unbroken run's.
  local resume=(--epochs 2 --val-size 0 --hidden 32 --device cuda)
  if [ $dry_run = 0 ]; then
    "$build/apps/mnist_train" --data "$MNIST_DIR" "${resume[@]}" --save "$work/whole.safetensors" >>"$runs" 2>&1 &&
      EMBER_SIGTERM_AT_CHECK=30 "$build/apps/mnist_train" --data "$MNIST_DIR" "${resume[@]}" \
        --save "$work/cut.safetensors" >>"$runs" 2>&1
    local stopped=$?
    "$build/apps/mnist_train" --data "$MNIST_DIR" "${resume[@]}" --save "$work/cut.safetensors" \
      --resume "$work/cut.safetensors" >>"$runs" 2>&1
    if cmp -s "$work/whole.safetensors" "$work/cut.safetensors"; then
      say "- SIGTERM at check 30 (exit $stopped) and --resume on cuda: byte-identical to the unbroken run"
    else
      say "- SIGTERM at check 30 (exit $stopped) and --resume on cuda: NOT identical to the unbroken run"
      rc=1
    fi
  else
    gpu "$build/apps/mnist_train" "${resume[@]}" --save "$work/cut.safetensors" --resume "$work/cut.safetensors"
  fi
  local gpu_acc cpu_acc cnn_acc
  gpu_acc=$(cat "$work/acc-mlp-cuda")
  cpu_acc=$(cat "$work/acc-mlp-cpu")
  cnn_acc=$(cat "$work/acc-cnn-cuda")
  note "MLP test accuracy cuda $gpu_acc, cpu $cpu_acc; CNN on cuda $cnn_acc"
  [ $dry_run = 1 ] && return $rc
  awk -v a="$gpu_acc" -v b="$cpu_acc" -v c="$cnn_acc" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01 && c >= 0.98) }' || rc=1
  return $rc
}

# ---- bench -------------------------------------------------------------------------------------
# Every kernel family at 1M and 64M elements (256 MB of f32) against the measured device-to-device
# copy and cuBLAS SGEMM; host-device copies and launch overhead.
section_bench() {
  local b=$1 rc=0
  gpu timeout "$b" "$build/apps/bench_kernels" --device cuda --sizes 1048576,67108864 --repeat 10 \
    --json "$out/bench.json" >"$work/bench.log" 2>&1 || rc=$?
  cat "$work/bench.log" >>"$runs"
  quote "$work/bench.log" "^== |%|GB/s|TFLOP|REFUSED" 80
  local refused
  refused=$(grep -c "REFUSED" "$work/bench.log")
  note "$(grep -c '(in use)' "$work/bench.log") timed, $refused refused"
  [ "$refused" = 0 ] && [ $rc = 0 ]
}

# ---- compare -----------------------------------------------------------------------------------
# ember's fused, graph-replayed MLP step next to PyTorch on the same GPU, both timed per epoch
# from a synchronized start to the loss read (CUDA events on PyTorch's side), the first epoch a
# warm-up. Eager and the tutorials' DataLoader first; torch.compile (mode reduce-overhead) last,
# its compilation reported apart as the first epoch's excess.
section_compare() {
  local b=$1 t0 rc=0
  [ $dry_run = 1 ] || python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null ||
    { note "no PyTorch with CUDA"; return 3; }
  local common=(--device cuda --build "$build" --data "$MNIST_DIR" --epochs 3 --rounds 1 --partial "$report")
  t0=$(date +%s)
  say "- eager (PyTorch preloaded and DataLoader) against ember's modes:"
  PYTHONUNBUFFERED=1 gpu timeout "$b" python3 scripts/compare_pytorch.py "${common[@]}" --models 32,512-256 \
    --torch-modes preloaded,dataloader >>"$runs" 2>&1 || rc=$?
  local left=$((b - ($(date +%s) - t0)))
  if [ "$left" -gt 20 ]; then
    say "- torch.compile (reduce-overhead), ${left} s left:"
    PYTHONUNBUFFERED=1 gpu timeout "$left" python3 scripts/compare_pytorch.py "${common[@]}" --models 32 \
      --torch-modes compile >>"$runs" 2>&1 || rc=$?
  else
    say "- torch.compile: not run (${left} s left)"
  fi
  note "$(grep -c '^784-.*images/s' "$report") configurations measured (lines above)"
  return $rc
}

# ---- mixed -------------------------------------------------------------------------------------
section_mixed() {
  local b=$1 rc=0
  [ $dry_run = 1 ] || python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null ||
    { note "no PyTorch with CUDA"; return 3; }
  PYTHONUNBUFFERED=1 gpu timeout "$b" python3 scripts/compare/mixed_precision.py --device cuda \
    --train "$build/apps/mnist_train" --data "$MNIST_DIR" --python python3 --models mlp --rounds 1 --epochs 3 \
    2>&1 | tee "$work/mixed.log" >>"$runs" || rc=$?  # into runs.log as it comes: a timeout keeps the rows so far
  quote "$work/mixed.log" '^\|' 20
  note "$(grep -E '^\| (ember bf16|PyTorch bf16 autocast) ' "$work/mixed.log" | awk -F'|' '{printf "%s %s/s; ", $2, $3}')"
  return $rc
}

# ---- loader ------------------------------------------------------------------------------------
section_loader() {
  local b=$1 rc=0
  gpu timeout "$b" "$build/apps/bench_loader" --data "$MNIST_DIR" --device cuda --epochs 5 >"$work/loader.log" 2>&1 || rc=$?
  cat "$work/loader.log" >>"$runs"
  quote "$work/loader.log" . 20
  note "$(grep "copy hidden" "$work/loader.log" | tr -s ' ' | cut -c1-120)"
  return $rc
}

# ---- devices -----------------------------------------------------------------------------------
section_devices() {
  local b=$1 rc=0
  gpu timeout "$b" "$build/apps/bench_devices" --steps 20 --cpu-budget 1.5 --threads "$(nproc)" \
    >"$work/devices.log" 2>&1 || rc=$?
  cat "$work/devices.log" >>"$runs"
  quote "$work/devices.log" . 30
  note "speedup $(grep -E '^(MLP 784-32-10|CNN 64-128-256)' "$work/devices.log" | awk '{print $NF}' | tr '\n' ' ')(smallest MLP, largest CNN)"
  return $rc
}

# ---- sanitize ----------------------------------------------------------------------------------
# The tools instrument ember's kernels only (--kernel-name kns=ember: its kernels live
# in namespace ember), so the time does not depend on cuDNN's and cuBLAS's. The tool's start-up is
# measured first, on one small test case, and recorded.
section_sanitize() {
  local b=$1 rc=0 tool t0
  [ $dry_run = 1 ] || command -v compute-sanitizer >/dev/null || { note "compute-sanitizer not found"; return 3; }
  local filter=(--kernel-name kns=ember)
  : >"$out/sanitize.log"
  t0=$(date +%s)
  gpu timeout $((b / 4)) compute-sanitizer --tool memcheck "${filter[@]}" "$build/tests/test_cuda" \
    "device-to-device copies, clone, copy_ and fill_ on the GPU" >>"$out/sanitize.log" 2>&1
  local startup=$(($(date +%s) - t0))
  say "- start-up with one test case: $startup s"
  # memcheck over the whole binary (cuBLAS, cuBLASLt and cuDNN calls included; the filter keeps
  # the check to ember's kernels), then initcheck and racecheck on the kernel tests. Each tool gets
  # an equal share of what is left.
  local kernel_tests="[#test_cuda_kernels],[#test_cuda_elementwise_kernels],[#test_cuda_half_kernels],[#test_cuda_streams]"
  local tools=(memcheck initcheck racecheck) i
  for i in 0 1 2; do
    tool=${tools[$i]}
    local left=$(((b - ($(date +%s) - t0)) / (3 - i)))
    [ "$left" -gt 5 ] || { say "- $tool: not run (no time left)"; continue; }
    local t0_tool which=(-# "~[#test_cuda_dist]") label="all of test_cuda but NCCL's"
    # NCCL probes its own kernels with cudaFuncGetAttributes and gets "no kernel image" for the
    # architectures it was not built for (an H200: 4 such API errors, its own and handled by it).
    [ $tool = memcheck ] || { which=(-# "$kernel_tests"); label="the kernel tests"; }
    t0_tool=$(date +%s)
    echo "==== compute-sanitizer --tool $tool" >>"$out/sanitize.log"
    EMBER_TEST_SIZES=small gpu timeout "$left" compute-sanitizer --tool "$tool" "${filter[@]}" --error-exitcode 99 \
      "$build/tests/test_cuda" "${which[@]}" >>"$out/sanitize.log" 2>&1
    local r=$?
    say "- $tool on $label (small sizes): exit $r in $(($(date +%s) - t0_tool)) s; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize.log" | tail -1)"
    [ $r -ne 0 ] && rc=$r
  done
  note "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize.log" | tr '\n' ' ')"
  return $rc
}

# ---- distributed -------------------------------------------------------------------------------
# Two GPUs with mpirun: 2 ranks × 64 against one GPU with 2 micro-batches of 64 (the same
# arithmetic: the parameters' hashes after each epoch should agree).
section_distributed() {
  local b=$1 gpus
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  command -v mpirun >/dev/null || { note "no mpirun here: one-rank NCCL tests only (test section)"; return 3; }
  [ "$gpus" -ge 2 ] || { note "$gpus GPU: one-rank NCCL tests only (test section)"; return 3; }
  local args=(--data "$MNIST_DIR" --epochs 2 --val-size 7952 --hidden 128 --log-step-losses)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  gpu timeout $((b / 2)) mpirun -np 2 --bind-to none "$build/apps/mnist_train" --distributed "${args[@]}" \
    --batch-size 64 --json-log "$work/dist-2.jsonl" >>"$runs" 2>&1 || { note "2-GPU run failed"; return 1; }
  gpu timeout $((b / 2)) "$build/apps/mnist_train" "${args[@]}" --device cuda --batch-size 128 --micro-batches 2 \
    --json-log "$work/dist-1.jsonl" >>"$runs" 2>&1 || { note "micro-batch run failed"; return 1; }
  local two one
  two=$(grep -o '"params_hash":"[0-9a-f]*"' "$work/dist-2.jsonl" | tr '\n' ' ')
  one=$(grep -o '"params_hash":"[0-9a-f]*"' "$work/dist-1.jsonl" | tr '\n' ' ')
  note "2 GPUs: $two; 1 GPU with 2 micro-batches: $one"
  [ "$two" = "$one" ]
}

# ---- main --------------------------------------------------------------------------------------
rm -f "$out/.stop"
{
  echo "# GPU check report"
  echo
  echo "Mode: $([ $dry_run = 1 ] && echo 'dry run (commands printed, not run; the build is real)' || echo full);" \
    "deadline $deadline s; sections in order: ${order[*]}."
} >"$report"
for name in "${order[@]}"; do
  wanted "$name" || continue
  if [ -f "$out/.stop" ]; then
    say "## $name: not run (the facts section stopped the check)"
    summary+=("$name|NOT RUN|0|stopped by facts")
    continue
  fi
  [ $dry_run = 1 ] && [ "$name" = build ] && budget[build]=1800  # two CI cores build far slower
  [ $dry_run = 1 ] && [ "$name" = build ] && deadline=$((deadline + 1800))
  run_section "$name"
done
rm -f "$out/.stop"

{
  echo
  echo "## Summary ($(elapsed) s)"
  echo
  echo "| section | status | seconds | note |"
  echo "| --- | --- | --- | --- |"
  for line in "${summary[@]}"; do
    IFS='|' read -r name status secs text <<<"$line"
    echo "| $name | $status | $secs | $text |"
  done
} >>"$report"

echo
echo "==== gpu_check summary ($(elapsed) s; report: $report)"
printf '%s\n' "${summary[@]}" | column -t -s '|' 2>/dev/null || printf '%s\n' "${summary[@]}"
printf '%s\n' "${summary[@]}" | grep -qE "\|(FAIL|TIMEOUT)\|" && exit 1
exit 0
