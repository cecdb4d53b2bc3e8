# scripts/gpu_check.sh's figure sections, sourced by it: transformer (attention and layer_norm
# against PyTorch), bench (every kernel against the copy and GEMM ceilings), compare and mixed
# (training steps against PyTorch), loader, devices, distributed (two GPUs), and stubborn (a planted
# child that ignores SIGTERM, for the test of the section watchdog).

# ---- transformer -------------------------------------------------------------------------------
# The fused attention against F.scaled_dot_product_attention and layer_norm against F.layer_norm,
# forward and forward + backward, f32 and bf16, at the ViT's shapes and at L = 1,024, d = 64, with
# CUDA events on both sides (scripts/compare/transformer.py; bench_kernels refuses a wrong result
# before timing it). The pairs' times go to transformer.json too.
section_transformer() {
  local b=$1 rc=0
  [ $dry_run = 1 ] || python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null ||
    { note "no PyTorch with CUDA"; return 3; }
  local compare=(python3 scripts/compare/transformer.py --bench "$build/apps/bench_kernels" --repeat 20)
  [ $dry_run = 0 ] || "${compare[@]}" --dry-run >/dev/null || { note "transformer.py --dry-run failed"; return 1; }
  PYTHONUNBUFFERED=1 gpu limit "$b" "${compare[@]}" --json "$out/transformer.json" >"$work/transformer.log" 2>&1 ||
    rc=$?
  cat "$work/transformer.log" >>"$runs"
  quote "$work/transformer.log" . 40
  note "$(grep -cE '^\| (attention|layer_norm) ' "$work/transformer.log") pairs timed"
  return $rc
}

# ---- bench -------------------------------------------------------------------------------------
# Every kernel family at 1M and 64M elements (256 MB of f32) against the measured device-to-device
# copy and cuBLAS SGEMM; host-device copies and launch overhead; the attention and layer_norm rows.
section_bench() {
  local b=$1 rc=0
  gpu limit "$b" "$build/apps/bench_kernels" --device cuda --sizes 1048576,67108864 --repeat 10 \
    --json "$out/bench.json" >"$work/bench.log" 2>&1 || rc=$?
  cat "$work/bench.log" >>"$runs"
  # Every row, as one compact table from the JSON (beside the report as bench.json); the JSON is
  # written at the end, so a run cut short leaves its printed lines instead, all of them.
  if [ -s "$out/bench.json" ]; then
    python3 scripts/gpu_check/bench_table.py "$out/bench.json" >>"$report"
  else
    quote "$work/bench.log" "^== |%|GB/s|TFLOP|REFUSED" 100000
  fi
  local refused
  refused=$(grep -c "REFUSED" "$work/bench.log")
  note "$(grep -c '(in use)' "$work/bench.log") timed, $refused refused"
  [ "$refused" = 0 ] && [ $rc = 0 ]
}

# ---- compare -----------------------------------------------------------------------------------
# Training steps next to PyTorch on the same GPU, each timed per epoch from a synchronized start to
# the loss read (CUDA events on PyTorch's side), the first epoch a warm-up. In order, each step with
# what is left of the budget: the MLPs' fused, graph-replayed step against PyTorch eager (its data
# preloaded, and the tutorials' DataLoader); the CNN at batch 64 and 256, ember in f32 and bf16
# against PyTorch eager and bf16 autocast; then torch.compile, whose cold compile (est. 30-60 s a
# model) comes last: the MLPs (mode reduce-overhead, the deep one first: never reached before) and
# the CNN at both batches, its compilation reported apart as the first epoch's excess.
section_compare() {
  local b=$1 t0 rc=0 batch
  [ $dry_run = 1 ] || python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null ||
    { note "no PyTorch with CUDA"; return 3; }
  local common=(--device cuda --build "$build" --data "$MNIST_DIR" --epochs 3 --rounds 1 --partial "$report")
  local cnn=(python3 scripts/compare/mixed_precision.py --device cuda --train "$build/apps/mnist_train"
    --data "$MNIST_DIR" --python python3 --models cnn --rounds 1 --epochs 3)
  t0=$(date +%s)
  compare_left() { echo $((b - ($(date +%s) - t0))); }
  say "- eager (PyTorch preloaded and DataLoader) against ember's modes:"
  PYTHONUNBUFFERED=1 gpu limit "$(compare_left)" python3 scripts/compare_pytorch.py "${common[@]}" --models 32,512-256 \
    --torch-modes preloaded,dataloader >>"$runs" 2>&1 || rc=$?
  for batch in 64 256; do
    [ "$(compare_left)" -gt 20 ] || { say "- the CNN at batch $batch: not run ($(compare_left) s left)"; continue; }
    say "- the CNN at batch $batch, eager and bf16 autocast ($(compare_left) s left):"
    PYTHONUNBUFFERED=1 gpu limit "$(compare_left)" "${cnn[@]}" --batch-size $batch \
      --configs "ember f32,ember bf16,PyTorch eager,PyTorch bf16 autocast" 2>&1 | tee "$work/cnn.log" >>"$runs" || rc=$?
    quote "$work/cnn.log" '^\|' 20
  done
  if [ "$(compare_left)" -gt 20 ]; then
    say "- torch.compile (reduce-overhead), the MLPs, $(compare_left) s left:"
    PYTHONUNBUFFERED=1 gpu limit "$(compare_left)" python3 scripts/compare_pytorch.py "${common[@]}" --models 512-256,32 \
      --torch-modes compile >>"$runs" 2>&1 || rc=$?
  else
    say "- torch.compile, the MLPs: not run ($(compare_left) s left)"
  fi
  for batch in 64 256; do
    [ "$(compare_left)" -gt 30 ] || { say "- torch.compile, the CNN at batch $batch: not run ($(compare_left) s left)"; continue; }
    say "- torch.compile, the CNN at batch $batch ($(compare_left) s left):"
    PYTHONUNBUFFERED=1 gpu limit "$(compare_left)" "${cnn[@]}" --batch-size $batch \
      --configs "ember f32,PyTorch compile,PyTorch compile + bf16 autocast" 2>&1 | tee "$work/cnn.log" >>"$runs" ||
      rc=$?
    quote "$work/cnn.log" '^\|' 20
  done
  note "$(grep -c '^784-.*images/s' "$report") MLP configurations, $(grep -c '^| .*PyTorch' "$report") CNN rows against PyTorch"
  return $rc
}

# ---- mixed -------------------------------------------------------------------------------------
section_mixed() {
  local b=$1 rc=0
  [ $dry_run = 1 ] || python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null ||
    { note "no PyTorch with CUDA"; return 3; }
  PYTHONUNBUFFERED=1 gpu limit "$b" python3 scripts/compare/mixed_precision.py --device cuda \
    --train "$build/apps/mnist_train" --data "$MNIST_DIR" --python python3 --models mlp --rounds 1 --epochs 3 \
    2>&1 | tee "$work/mixed.log" >>"$runs" || rc=$?  # into runs.log as it comes: a timeout keeps the rows so far
  quote "$work/mixed.log" '^\|' 20
  note "$(grep -E '^\| (ember bf16|PyTorch bf16 autocast) ' "$work/mixed.log" | awk -F'|' '{printf "%s %s/s; ", $2, $3}')"
  return $rc
}

# ---- loader ------------------------------------------------------------------------------------
section_loader() {
  local b=$1 rc=0
  gpu limit "$b" "$build/apps/bench_loader" --data "$MNIST_DIR" --device cuda --epochs 5 >"$work/loader.log" 2>&1 || rc=$?
  cat "$work/loader.log" >>"$runs"
  quote "$work/loader.log" . 20
  note "$(grep "copy hidden" "$work/loader.log" | tr -s ' ' | cut -c1-120)"
  return $rc
}

# ---- devices -----------------------------------------------------------------------------------
section_devices() {
  local b=$1 rc=0
  gpu limit "$b" "$build/apps/bench_devices" --steps 20 --cpu-budget 1.5 --threads "$(nproc)" \
    >"$work/devices.log" 2>&1 || rc=$?
  cat "$work/devices.log" >>"$runs"
  quote "$work/devices.log" . 30
  note "speedup $(grep -E '^(MLP 784-32-10|CNN 64-128-256)' "$work/devices.log" | awk '{print $NF}' | tr '\n' ' ')(smallest MLP, largest CNN)"
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
  gpu limit $((b / 2)) mpirun -np 2 --bind-to none "$build/apps/mnist_train" --distributed "${args[@]}" \
    --batch-size 64 --json-log "$work/dist-2.jsonl" >>"$runs" 2>&1 || { note "2-GPU run failed"; return 1; }
  gpu limit $((b / 2)) "$build/apps/mnist_train" "${args[@]}" --device cuda --batch-size 128 --micro-batches 2 \
    --json-log "$work/dist-1.jsonl" >>"$runs" 2>&1 || { note "micro-batch run failed"; return 1; }
  local two one
  two=$(grep -o '"params_hash":"[0-9a-f]*"' "$work/dist-2.jsonl" | tr '\n' ' ')
  one=$(grep -o '"params_hash":"[0-9a-f]*"' "$work/dist-1.jsonl" | tr '\n' ' ')
  note "2 GPUs: $two; 1 GPU with 2 micro-batches: $one"
  [ "$two" = "$one" ]
}

# ---- stubborn ----------------------------------------------------------------------------------
# Not a check of the GPU: a child that ignores SIGTERM under a plain GNU timeout (no -k), which
# moves itself and its child into a process group of their own, as the sections' commands did
# before `limit`. The test gpu_check_watchdog names it with --only and shows that the watchdog ends
# the whole tree (its pid and timeout's are written to stubborn.pid) and that the next section keeps its budget.
section_stubborn() {
  timeout 600 bash -c 'trap "" TERM; echo $$ $PPID >"$1"; while :; do sleep 1; done' _ "$out/stubborn.pid"
}
