# scripts/gpu_check.sh's correctness sections, sourced by it: test (test_cuda and the device tests),
# train (mnist_train on the GPU against the CPU), vit (the ViT on both devices) and sanitize
# (compute-sanitizer on ember's kernels).

# ---- test --------------------------------------------------------------------------------------
section_test() {
  local b=$1 rc=0 t0
  [ $dry_run = 1 ] || [ -x "$build/tests/test_cuda" ] || { note "not built"; return 1; }
  # test_cuda first, with each test case's time (the next budgets come from them), at most 70% of
  # the budget so that the device tests run too.
  t0=$(date +%s)
  gpu limit $((b * 7 / 10)) "$build/tests/test_cuda" --durations yes >"$out/test.log" 2>&1 || rc=$?
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
  (cd "$build" && gpu limit $((b - $(date +%s) + t0 > 5 ? b - $(date +%s) + t0 : 5)) \
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
  grep -o '"train_loss":[-0-9.e+]*' "$work/run.jsonl" 2>/dev/null | cut -d: -f2 >"$work/loss-$label"
  rm -f "$work/run.jsonl"
  say "- $label: test accuracy ${acc:-?}, last epoch ${ips%.*} images/s, training loss by epoch" \
    "$(tr '\n' ' ' <"$work/loss-$label")($(($(date +%s) - t0)) s, exit $rc)"
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

# ---- vit ---------------------------------------------------------------------------------------
# The ViT of --model vit (patch 4, width 64, depth 4, 4 heads; its recipe) for 3 epochs from one
# seed on the GPU, in f32 and bf16, and on the CPU with every core. The devices' kernels sum in
# different orders, so the runs part after the first steps; the check is that they train alike:
# each epoch's mean training loss within 2% of the CPU's and the test accuracy within a point
# (the MLP's f32 runs agreed to 4 digits on the H200). Images/s of each run beside it.
section_vit() {
  [ -f "$MNIST_DIR/train-images-idx3-ubyte.gz" ] || { note "no MNIST files in $MNIST_DIR"; return 3; }
  local vit=(--model vit --epochs 3 --val-size 0 --seed 0) rc=0
  train_run vit-cuda "${vit[@]}" --device cuda || rc=1
  train_run vit-cpu "${vit[@]}" --device cpu --threads "$(nproc)" || rc=1
  train_run vit-cuda-bf16 "${vit[@]}" --device cuda --precision bf16 || rc=1
  note "ViT test accuracy cuda $(cat "$work/acc-vit-cuda"), cpu $(cat "$work/acc-vit-cpu"), cuda bf16 $(cat "$work/acc-vit-cuda-bf16")"
  [ $dry_run = 1 ] && return $rc
  paste "$work/loss-vit-cuda" "$work/loss-vit-cpu" | awk -v a="$(cat "$work/acc-vit-cuda")" \
    -v b="$(cat "$work/acc-vit-cpu")" '{ d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > 0.02) bad = 1; n++ }
      END { d = a - b; if (d < 0) d = -d; exit !(n == 3 && !bad && d <= 0.01) }' ||
    { say "- the GPU's and the CPU's ViT runs part by more than 2% of a loss or a point of accuracy"; rc=1; }
  return $rc
}
# ---- sanitize ----------------------------------------------------------------------------------
# The tools instrument ember's kernels only (--kernel-name kns=ember: its kernels live in namespace
# ember), so the time does not depend on cuDNN's and cuBLAS's. The tool's start-up is measured
# first, on one small test case, and recorded. The sizes: full (EMBER_TEST_SIZES unset) when the
# budget is at least 300 s, else small, and the report says which. On the H200 memcheck took 25 s
# over test_cuda at small sizes, and test_cuda alone 23-28 s at full sizes; memcheck's factor of
# about 5 on ember's kernels puts full sizes at about 2 minutes for it, racecheck and initcheck less.
sanitize_full_budget=300
section_sanitize() {
  local b=$1 rc=0 tool t0 sizes=small
  [ $dry_run = 1 ] || command -v compute-sanitizer >/dev/null || { note "compute-sanitizer not found"; return 3; }
  [ "$b" -ge $sanitize_full_budget ] && sizes=full
  say "- sizes: $sizes (full at a budget of $sanitize_full_budget s or more; this one is $b s)"
  local filter=(--kernel-name kns=ember) size_env=(env EMBER_TEST_SIZES=small)
  [ $sizes = full ] && size_env=(env -u EMBER_TEST_SIZES)
  : >"$out/sanitize.log"
  t0=$(date +%s)
  gpu limit $((b / 4)) compute-sanitizer --tool memcheck "${filter[@]}" "$build/tests/test_cuda" \
    "device-to-device copies, clone, copy_ and fill_ on the GPU" >>"$out/sanitize.log" 2>&1
  local startup=$(($(date +%s) - t0))
  say "- start-up with one test case: $startup s"
  # memcheck over the whole binary but NCCL's file (cuBLAS, cuBLASLt and cuDNN calls included; the
  # filter keeps the check to ember's kernels), then initcheck and racecheck: on the kernel tests at
  # small sizes, over the same as memcheck at full sizes. Each tool gets an equal share of what is left.
  # NCCL probes its own kernels with cudaFuncGetAttributes and gets "no kernel image" for the
  # architectures it was not built for (an H200: 4 such API errors, its own and handled by it).
  local kernel_tests="[#test_cuda_kernels],[#test_cuda_elementwise_kernels],[#test_cuda_half_kernels],[#test_cuda_streams],[#test_cuda_transformer_kernels]"
  local tools=(memcheck initcheck racecheck) i
  for i in 0 1 2; do
    tool=${tools[$i]}
    local left=$(((b - ($(date +%s) - t0)) / (3 - i)))
    [ "$left" -gt 5 ] || { say "- $tool: not run (no time left)"; continue; }
    local t0_tool which=(-# "~[#test_cuda_dist]") label="all of test_cuda but NCCL's"
    if [ $tool != memcheck ] && [ $sizes = small ]; then which=(-# "$kernel_tests"); label="the kernel tests"; fi
    t0_tool=$(date +%s)
    echo "==== compute-sanitizer --tool $tool ($sizes sizes)" >>"$out/sanitize.log"
    gpu limit "$left" "${size_env[@]}" compute-sanitizer --tool "$tool" "${filter[@]}" --error-exitcode 99 \
      "$build/tests/test_cuda" "${which[@]}" >>"$out/sanitize.log" 2>&1
    local r=$?
    say "- $tool on $label ($sizes sizes): exit $r in $(($(date +%s) - t0_tool)) s; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize.log" | tail -1)"
    [ $r -ne 0 ] && rc=$r
  done
  note "$sizes sizes: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize.log" | tr '\n' ' ')"
  return $rc
}
