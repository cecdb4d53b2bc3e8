# scripts/gpu_check.sh's first two sections, sourced by it: facts (the GPU, the driver against the
# toolkit: the build adapts or the check stops) and build (Release for sm_90 against the unpacked
# .deps), and the environment every later section runs in.

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

# cuDNN 9 opens its engine libraries by name, so its folder must be on the path, as NCCL's.
cudnn_root=$(find_cudnn_root)
nccl_root=$(find_nccl_root)
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:$deps/usr/lib/x86_64-linux-gnu/openblas-pthread${cudnn_root:+:$cudnn_root/lib}${nccl_root:+:$nccl_root/lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MNIST_DIR=${MNIST_DIR:-$root/data/mnist}

