#!/usr/bin/env bash
# Faults from outside against mnist_train --save, for docs/checkpoints.md (not a CI test: it needs
# root for the tmpfs and takes minutes):
#   1. kill -9 at random moments of a CNN run, each followed by --resume to the end: every run must
#      leave a checkpoint --resume takes, end with the uninterrupted run's bytes, and leave no
#      temporary file once resumed;
#   2. a small tmpfs that fills during a save: the run stops with a message saying what is
#      resumable, and resuming on a larger disk ends with the uninterrupted run's bytes;
#   3. `ulimit -f` below a checkpoint's size: EFBIG reported like a full disk, no silent death.
#   scripts/checkpoint_trials.sh MNIST_TRAIN MNIST_DIR [KILLS]
set -u
train=$(realpath "$1") mnist=$(realpath "$2") kills=${3:-50}
work=$(mktemp -d)
trap 'umount "$work/small" 2>/dev/null; rm -rf "$work"' EXIT
args=(--data "$mnist" --model cnn --channels 8,16 --hidden 32 --epochs 3 --workers 0 --val-size 1000)
"$train" "${args[@]}" --save "$work/ref.safetensors" >/dev/null || exit 1
ok=0 bad=0
for ((i = 1; i <= kills; i++)); do
  dir=$work/kill-$i
  mkdir -p "$dir"
  # Odd runs: killed the moment a save's temporary file appears (the first, second or third save's,
  # after 0-3 ms more); even runs: at a random moment of the first two thirds of the run.
  python3 - "$train" "$dir" "$i" "${args[@]}" <<'PY'
import os, random, signal, subprocess, sys, time
train, folder, trial, args = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
random.seed(trial)
p = subprocess.Popen([train, *args, "--save", os.path.join(folder, "m.safetensors")],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if trial % 2:
    wanted, seen, start = random.randint(1, 3), set(), time.time()
    while p.poll() is None and time.time() - start < 60:
        names = {n for n in os.listdir(folder) if ".tmp." in n and "epoch" in n}
        if names - seen:
            seen |= names
            if len({n.split(".tmp.")[0].split(".state")[0] for n in seen}) >= wanted:
                time.sleep(random.uniform(0, 0.003))
                break
        time.sleep(0.0002)
else:
    time.sleep(random.uniform(0.3, 4.0))
p.send_signal(signal.SIGKILL)
p.wait()
PY
  left=$(ls -a "$dir" | grep -c '\.tmp\.')
  # Killed before any save finished: nothing was lost, and the message says to start anew.
  if "$train" "${args[@]}" --save "$dir/m.safetensors" --resume "$dir/m.safetensors" >"$dir/resume.txt" 2>&1 ||
    { grep -q "no such checkpoint file\|nothing to resume: start the run anew" "$dir/resume.txt" &&
      "$train" "${args[@]}" --save "$dir/m.safetensors" >>"$dir/resume.txt" 2>&1; }; then
    if cmp -s "$work/ref.safetensors" "$dir/m.safetensors" && ! ls -a "$dir" | grep -q '\.tmp\.'; then
      ok=$((ok + 1))
      what=$(grep -h "^resuming\|^note: --save" "$dir/resume.txt" | tr '\n' ' ' | cut -c1-150)
      echo "kill $i: ${what:-killed before the first save finished: started anew}" \
        "(temporaries left by the kill: $left; after the resume: 0)"
    else
      bad=$((bad + 1)) && echo "kill $i: FAIL: differs or temporaries remain"
    fi
  else
    bad=$((bad + 1)) && echo "kill $i: FAIL: $(tail -1 "$dir/resume.txt")"
  fi
  rm -rf "$dir"
done
echo "kill -9: $ok of $kills runs resumed to the uninterrupted run's bytes, $bad failed"

# A 1 MiB tmpfs: the CNN at these widths writes ~0.4 MB of model and ~0.8 MB of state a save.
mkdir -p "$work/small"
if mount -t tmpfs -o size=1m tmpfs "$work/small" 2>/dev/null; then
  "$train" "${args[@]}" --save "$work/small/m.safetensors" >/dev/null 2>"$work/full.txt"
  echo "tmpfs of 1 MiB: exit $?: $(cat "$work/full.txt")"
  echo "left on it: $(ls -a "$work/small" | tr '\n' ' ')"
  mkdir -p "$work/big" && cp "$work/small"/m.* "$work/big/" 2>/dev/null
  "$train" "${args[@]}" --save "$work/big/m.safetensors" --resume "$work/big/m.safetensors" >"$work/resume.txt" 2>&1 &&
    cmp -s "$work/ref.safetensors" "$work/big/m.safetensors" &&
    echo "moved to a larger disk and resumed: $(head -1 "$work/resume.txt"); the uninterrupted run's bytes" ||
    echo "FAIL: resume after the full disk: $(tail -2 "$work/resume.txt")"
  umount "$work/small"
else
  echo "tmpfs: cannot mount (not root?): skipped"
fi

# ulimit -f in 1 KiB blocks: 400 KiB lets the models through and stops the first state file.
mkdir -p "$work/limited"
(ulimit -f 400 && "$train" "${args[@]}" --save "$work/limited/m.safetensors" >/dev/null 2>"$work/limit.txt")
echo "ulimit -f 400: exit $?: $(cat "$work/limit.txt")"
