#!/usr/bin/env bash
# Long runs from the outside (Note [stop signals], Note [checkpoint set]): SIGTERM, SIGINT and SIGUSR1
# mid-epoch save a checkpoint, say how to continue and exit 143, 130 or 138, and the resume ends
# byte-identical to an uninterrupted run; a second signal kills; a resume keeps the JSON log's and
# the plot's history; a resume that changes the data, the seed, the split, the order or the model is
# refused naming the flag; a second run on the same --save is refused naming the holder; output
# paths are checked before the first step; --threads is capped to the CPUs this process may use.
#   resume_tests.sh MNIST_TRAIN MNIST_DIR WORK_DIR
set -u
train=$1 mnist=$2 work=$3
if [ ! -f "$mnist/train-images-idx3-ubyte.gz" ] && [ ! -f "$mnist/train-images-idx3-ubyte" ]; then
  echo "resume_tests: skipped: no MNIST files in $mnist"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/expect.sh"

# ---- signals: stop mid-epoch, save, resume to the uninterrupted run's bytes ----------------------
# The CNN takes seconds an epoch (over 3 s at channels 16,32): a signal sent 1 s after epoch 1's
# checkpoint lands mid-epoch 2 (the test checks that it did).
cnn=(--data "$mnist" --model cnn --channels 16,32 --epochs 2 --workers 1)
"$train" "${cnn[@]}" --save "$work/ref.safetensors" --json-log "$work/ref.jsonl" >/dev/null || fail "uninterrupted CNN"
for signal in TERM INT USR1; do
  dir=$work/$signal
  mkdir -p "$dir"
  "$train" "${cnn[@]}" --save "$dir/m.safetensors" --json-log "$dir/m.jsonl" >"$dir/out.txt" 2>"$dir/err.txt" &
  pid=$!
  while [ ! -f "$dir/m.epoch-1.state.safetensors" ] && kill -0 $pid 2>/dev/null; do sleep 0.05; done
  sleep 1
  kill -s $signal $pid
  wait $pid
  code=$?
  expected=$((128 + $(kill -l $signal)))
  [ $code = $expected ] && pass "SIG$signal: exit $code" || fail "SIG$signal: exit $code, expected $expected"
  if grep -q "^stopped by SIG$signal at epoch 1, step [1-9][0-9]*: the newest complete checkpoint is m.epoch-1.step-[0-9]*.safetensors" "$dir/err.txt" &&
    grep -q "^to continue: .*--resume $dir/m.safetensors" "$dir/err.txt"; then
    pass "SIG$signal: the message names the mid-epoch checkpoint and the command that continues"
  else
    fail "SIG$signal: message: $(cat "$dir/err.txt")"
  fi
  ls "$dir" | grep -q '^m\.epoch-1\.step-[0-9]*\.state\.safetensors$' && pass "SIG$signal: a mid-epoch checkpoint" ||
    fail "SIG$signal: no mid-epoch checkpoint: $(ls "$dir")"
  [ $signal = TERM ] || continue  # one resume suffices: the stop is the same whatever the signal
  "$train" "${cnn[@]}" --save "$dir/m.safetensors" --json-log "$dir/m.jsonl" --resume "$dir/m.safetensors" \
    >"$dir/resume.txt" 2>&1 || fail "SIG$signal: resume: $(tail -2 "$dir/resume.txt")"
  cmp -s "$work/ref.safetensors" "$dir/m.safetensors" && pass "SIG$signal: the resumed run ends byte-identical" ||
    fail "SIG$signal: the resumed run's model differs"
done
# Epoch 1's train_loss, resumed mid-epoch, is the uninterrupted run's (the loss sum was saved).
figures() { grep -o '"\(epoch\|train_loss\|val_loss\|val_acc\|test_loss\|test_acc\)":[^,}]*' "$1"; }
[ "$(figures "$work/ref.jsonl")" = "$(figures "$work/TERM/m.jsonl")" ] &&
  pass "a run stopped mid-epoch and resumed logs the uninterrupted run's figures" ||
  fail "log after a mid-epoch stop: $(diff <(figures "$work/ref.jsonl") <(figures "$work/TERM/m.jsonl") | head -5)"
# A stop at a planned step (EMBER_SIGTERM_AT_CHECK, the hook for runs whose steps are too short
# to aim a signal at, a GPU's): the first epoch (epoch 0) holds 79 steps, so check 30 falls mid-epoch.
dir=$work/planned && mkdir -p "$dir"
quick=(--data "$mnist" --hidden 32 --epochs 2 --val-size 0 --workers 0)
"$train" "${quick[@]}" --save "$dir/ref.safetensors" >/dev/null 2>&1 || fail "planned stop: the unbroken run"
EMBER_SIGTERM_AT_CHECK=30 "$train" "${quick[@]}" --save "$dir/m.safetensors" >/dev/null 2>"$dir/err.txt"
code=$?
[ $code = 143 ] && grep -q "^stopped by SIGTERM at epoch 0, step 30:" "$dir/err.txt" &&
  pass "EMBER_SIGTERM_AT_CHECK=30 stops at epoch 0, step 30 with exit 143" ||
  fail "planned stop: exit $code, $(head -2 "$dir/err.txt")"
"$train" "${quick[@]}" --save "$dir/m.safetensors" --resume "$dir/m.safetensors" >/dev/null 2>&1 &&
  cmp -s "$dir/ref.safetensors" "$dir/m.safetensors" && pass "the planned stop resumes byte-identical" ||
  fail "planned stop: the resumed run's model differs"
# A second signal: the default action, death by that signal. Both sent while the process is stopped
# (SIGSTOP), so that neither can be acted on before the other arrives; SIGCONT delivers them in turn.
dir=$work/twice && mkdir -p "$dir"
python3 - "$train" "$dir" "${cnn[@]}" <<'PY' && pass "a second stop signal kills at once" || fail "a second stop signal"
import os, signal, subprocess, sys, time
train, folder, args = sys.argv[1], sys.argv[2], sys.argv[3:]
p = subprocess.Popen([train, *args, "--save", os.path.join(folder, "m.safetensors")], stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
time.sleep(2)
p.send_signal(signal.SIGSTOP)
p.send_signal(signal.SIGINT)
p.send_signal(signal.SIGTERM)
p.send_signal(signal.SIGCONT)
code = p.wait()
print(f"exit {code}")
sys.exit(0 if code in (-signal.SIGINT, -signal.SIGTERM) else 1)
PY

# ---- history: killed after epoch 1 (while saving epoch 2), resumed: the same log and plot ------
mlp=(--workers 0)  # with --data and --epochs
"$train" "${mlp[@]}" --data "$mnist" --epochs 3 --save "$work/h-ref.safetensors" --json-log "$work/h-ref.jsonl" --plot "$work/h-ref.svg" >/dev/null
mkdir -p "$work/hist"
EMBER_FILE_TRACE=$work/hist/ops.txt "$train" "${mlp[@]}" --data "$mnist" --epochs 3 --save "$work/hist/t.safetensors" --json-log "$work/hist/t.jsonl" \
  --plot "$work/hist/t.svg" >/dev/null
kill_at=$(grep -n "create .*t\.epoch-2\.safetensors" "$work/hist/ops.txt" | cut -d: -f1)
(EMBER_FAULT_AT=$kill_at "$train" "${mlp[@]}" --data "$mnist" --epochs 3 --save "$work/hist/m.safetensors" \
  --json-log "$work/hist/m.jsonl" --plot "$work/hist/m.svg" >/dev/null 2>&1; exit $?) 2>/dev/null  # no "Killed" line
[ "$(grep -c '"epoch"' "$work/hist/m.jsonl")" = 2 ] && pass "killed while saving epoch 2: the log had 2 epochs" ||
  fail "the kill point: $(cat "$work/hist/m.jsonl")"
"$train" "${mlp[@]}" --data "$mnist" --epochs 3 --save "$work/hist/m.safetensors" --json-log "$work/hist/m.jsonl" \
  --plot "$work/hist/m.svg" --resume "$work/hist/m.safetensors" >/dev/null || fail "history: resume"
timing='"\(epoch_s\|images_per_s\|train_s\|input_wait_s\|communication_wait_s\|gemm_s\)":[^,}]*'
[ "$(sed "s/$timing//g" "$work/h-ref.jsonl")" = "$(sed "s/$timing//g" "$work/hist/m.jsonl")" ] &&
  pass "the resumed run's JSON log equals the uninterrupted run's, timing aside" ||
  fail "JSON logs differ: $(diff <(sed "s/$timing//g" "$work/h-ref.jsonl") <(sed "s/$timing//g" "$work/hist/m.jsonl") | head -6)"
cmp -s "$work/h-ref.svg" "$work/hist/m.svg" && pass "the resumed run's plot equals the uninterrupted run's" ||
  fail "the plots differ"

# ---- a resume refuses what breaks its bit-for-bit promise, naming the flag -------------------------
"$train" "${mlp[@]}" --data "$mnist" --epochs 1 --save "$work/r.safetensors" >/dev/null || fail "a run to resume"
mkdir -p "$work/fewer"
python3 - "$mnist" "$work/fewer" <<'PY'
import gzip, os, sys
for name in os.listdir(sys.argv[1]):
    if name.endswith(".gz"):
        data = gzip.open(os.path.join(sys.argv[1], name)).read()
        if name.startswith("train"):  # 2,000 training images: the count is bytes 4-8, big-endian
            size = 16 + 2000 * 784 if "images" in name else 8 + 2000
            data = data[:4] + (2000).to_bytes(4, "big") + data[8:size]
        open(os.path.join(sys.argv[2], name[:-3]), "wb").write(data)
PY
cp "$work/r.epoch-1.safetensors" "$work/r-before.safetensors"
for case in "training data (--data)|--data $work/fewer --val-size 1666" "--seed|--data $mnist --seed 3" \
  "--val-size|--data $mnist --val-size 1000" "shuffle (--no-shuffle)|--data $mnist --no-shuffle" \
  "--hidden|--data $mnist --hidden 64" "--model|--data $mnist --model cnn --hidden 32"; do
  flag=${case%%|*}
  read -r -a change <<<"${case#*|}"
  expect 2 "the checkpoint was saved with $flag" "--resume with another ${flag}" -- \
    "$train" "${mlp[@]}" --epochs 2 "${change[@]}" --save "$work/r.safetensors" --resume "$work/r.safetensors"
done
grep -q "size mismatch\|a resumed run must keep it" "$work/err.txt" || fail "--model: $(cat "$work/err.txt")"
cmp -s "$work/r-before.safetensors" "$work/r.epoch-1.safetensors" && pass "refused resumes leave the checkpoint as it was" ||
  fail "a refused resume changed the checkpoint"
"$train" "${mlp[@]}" --data "$mnist" --epochs 2 --batch-size 64 --lr 0.3 --save "$work/r.safetensors" --resume "$work/r.safetensors" \
  >"$work/out.txt" 2>&1 && grep -q "note: --resume: the checkpoint was saved with --batch-size 128, this run has 64" "$work/out.txt" &&
  grep -q "note: --resume: the checkpoint was saved with --lr 0.5, this run has 0.3" "$work/out.txt" &&
  pass "a changed batch size and rate are noted" || fail "notes: $(grep note "$work/out.txt")"
expect 2 "the checkpoint was saved with --batch-size 64" "a mid-epoch checkpoint keeps its batches" -- \
  "$train" "${cnn[@]}" --save "$work/TERM/m2.safetensors" --batch-size 32 --resume "$(ls "$work"/TERM/m.epoch-1.step-*.state.safetensors | head -1)"

# ---- one run per --save: the second is refused, naming the holder -----------------------------------
"$train" "${cnn[@]}" --save "$work/lock.safetensors" >/dev/null 2>&1 &
pid=$!
while [ ! -s "$work/lock.safetensors.lock" ] && kill -0 $pid 2>/dev/null; do sleep 0.05; done
expect 2 "lock.safetensors is being written by another run (.*lock.safetensors.lock is locked by process $pid on host" \
  "a second run on the same --save" -- "$train" "${mlp[@]}" --data "$mnist" --save "$work/lock.safetensors"
kill -KILL $pid 2>/dev/null
wait $pid 2>/dev/null
"$train" "${mlp[@]}" --data "$mnist" --epochs 1 --save "$work/lock.safetensors" >/dev/null && pass "a killed holder's lock is free" ||
  fail "the lock outlived its holder"

# ---- output paths: checked before the first step ------------------------------------------------
mkdir -p "$work/folder.safetensors"
for case in "--save|$work/folder.safetensors|is a folder" "--save|$work/missing/m.safetensors|its folder .* does not exist" \
  "--json-log|$work/missing/log.jsonl|its folder .* does not exist" "--plot|/proc/curves.svg|cannot create a file in /proc" \
  "--json-log|/dev/null/log.jsonl|/dev/null is not a folder"; do
  IFS='|' read -r flag path pattern <<<"$case"
  expect 2 "$flag $path: $pattern" "$flag $path: refused" -- "$train" "${mlp[@]}" --data "$mnist" "$flag" "$path"
  grep -q "Epoch \[0\]" "$work/out.txt" && fail "$flag $path: an epoch trained before the refusal"
done
[ -z "$(ls "$work/folder.safetensors")" ] && [ ! -e "$work/folder.safetensors.state.safetensors" ] &&
  pass "nothing written beside a --save folder" || fail "stray files: $(ls "$work" | grep folder)"

# ---- --threads within the CPUs this process may use --------------------------------------------
cores=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
"$train" "${mlp[@]}" --data "$mnist" --epochs 1 --threads 999 >"$work/out.txt" 2>&1 &&
  grep -q "note: --threads 999: this process may use [0-9]* CPU.*; using" "$work/out.txt" &&
  pass "--threads 999 capped to the usable CPUs" || fail "--threads 999: $(grep -i thread "$work/out.txt" | head -2)"
taskset -c 0 "$train" --data "$mnist" --epochs 1 --threads 2 --workers 1 >"$work/out.txt" 2>&1 &&
  grep -q "note: --threads 2: this process may use 1 CPU" "$work/out.txt" &&
  grep -q "warning: --threads 1 and --workers 1 together ask for more than the 1 CPU" "$work/out.txt" &&
  pass "an affinity of one CPU caps --threads, and --workers beside it is warned of" ||
  fail "taskset -c 0 (of $cores): $(grep -i 'thread\|worker' "$work/out.txt" | head -3)"
# The defaults are chosen from the CPUs (Note [threads and workers]): no warning about themselves.
for cpus in 0 0,1; do
  [ "$cores" -gt "${cpus: -1}" ] || continue
  taskset -c "$cpus" "$train" --data "$mnist" --epochs 1 >"$work/out.txt" 2>&1 &&
    ! grep -qiE "^(warning|note):" "$work/out.txt" &&
    pass "the defaults on CPUs $cpus print no warning or note" ||
    fail "defaults on CPUs $cpus: $(grep -iE '^(warning|note):' "$work/out.txt" | head -2)"
done

echo "resume_tests: $failures failure(s)"
[ $failures -eq 0 ]
