#!/usr/bin/env bash
# The crash test of mnist_train --save (Note [checkpoint set], Note [file fault hook]): a short run
# is stopped at every file operation of two consecutive saves and the pruning after them — killed
# (SIGKILL, as kill -9; a write torn in half first) or failed with ENOSPC — and then resumed. Every
# case must leave a checkpoint that --resume takes, end with the same model file, byte for byte, as
# an uninterrupted run, and leave no temporary file once the resumed run holds the set. The order
# of the operations is checked from the trace: each file fsynced before its rename, each rename
# followed by the folder's fsync, the model before its state, the state before the stable name,
# pruning last.
#   checkpoint_faults.sh MNIST_TRAIN MNIST_DIR WORK_DIR [MODELS [KINDS [POINTS]]]
# MODELS: "mlp cnn" (default); KINDS: "kill enospc" (default); POINTS: "all" (default) or "one"
# (the first operation of the second save: what the sanitizer stages run).
set -u
train=$1 mnist=$2 work=$3 models=${4:-mlp cnn} kinds=${5:-kill enospc} points=${6:-all}
if [ ! -f "$mnist/train-images-idx3-ubyte.gz" ] && [ ! -f "$mnist/train-images-idx3-ubyte" ]; then
  echo "checkpoint_faults: skipped: no MNIST files in $mnist"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work/data"
# A small copy of MNIST (1,000 training and 200 test images), so that each of the ~260 runs takes
# about half a second.
python3 - "$mnist" "$work/data" <<'PY'
import gzip, os, struct, sys
src, dst = sys.argv[1:3]
for name, count in [("train-images-idx3-ubyte", 1000), ("train-labels-idx1-ubyte", 1000),
                    ("t10k-images-idx3-ubyte", 200), ("t10k-labels-idx1-ubyte", 200)]:
    path = os.path.join(src, name)
    data = gzip.open(path + ".gz").read() if os.path.exists(path + ".gz") else open(path, "rb").read()
    dims = data[3]
    shape = list(struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims]))
    per_item = 1
    for d in shape[1:]:
        per_item *= d
    header = data[:4] + struct.pack(">I", count) + data[8:4 + 4 * dims]
    body = data[4 + 4 * dims:4 + 4 * dims + count * per_item]
    open(os.path.join(dst, name), "wb").write(header + body)
PY
failures=0 cases=0
fail() { echo "FAIL $1"; failures=$((failures + 1)); }

for model in $models; do
  args=(--dataset idx --data "$work/data" --model "$model" --epochs 3 --workers 0 --keep 1 --val-size 200)
  [ "$model" = cnn ] && args+=(--channels 4,8 --hidden 16)
  dir=$work/$model
  mkdir -p "$dir/ref" "$dir/trace"
  "$train" "${args[@]}" --save "$dir/ref/m.safetensors" >/dev/null || { fail "$model: the uninterrupted run"; continue; }
  EMBER_FILE_TRACE=$dir/trace/ops.txt "$train" "${args[@]}" --save "$dir/trace/m.safetensors" >/dev/null ||
    { fail "$model: the traced run"; continue; }
  # The order of every save's operations, from the trace.
  if python3 - "$dir/trace/ops.txt" <<'PY'; then echo "ok   $model: the trace shows the durable order"; else fail "$model: order"; fi
import re, sys
ops = [line.split(" ", 2)[1:] for line in open(sys.argv[1]).read().splitlines()]
problems = []
for i, (op, path) in enumerate(ops):
    nxt = ops[i + 1][0] if i + 1 < len(ops) else None
    if op == "rename" and nxt != "fsync-folder":
        problems.append(f"rename of {path} not followed by the folder's fsync")
    if op == "create" and [o for o, _ in ops[i + 1:i + 4]] != ["write", "fsync", "rename"]:
        problems.append(f"{path}: not written, fsynced and renamed in that order")
names = [p.strip() for o, p in ops if o == "rename"]
for epoch in (1, 2, 3):
    model, state = f"m.epoch-{epoch}.safetensors", f"m.epoch-{epoch}.state.safetensors"
    order = [i for i, n in enumerate(names) if n.endswith(model) or n.endswith(state) or n.endswith("/m.safetensors") or n == "m.safetensors"]
    m = next(i for i, n in enumerate(names) if n.endswith(model))
    s = next(i for i, n in enumerate(names) if n.endswith(state))
    stable = next(i for i in range(s, len(names)) if names[i].endswith("m.safetensors") and ".epoch-" not in names[i])
    if not m < s < stable:
        problems.append(f"epoch {epoch}: model, state and stable name out of order")
unlinks = [i for i, (o, _) in enumerate(ops) if o == "unlink"]
for i in unlinks:
    if "state" not in ops[i][1] and (i == 0 or ops[i - 1][0] != "unlink"):
        problems.append(f"{ops[i][1]}: a model removed before its state")
print("\n".join(problems))
sys.exit(1 if problems else 0)
PY
  # The points: from the second save's first operation to the last (its pruning included).
  first=$(grep -n "create .*m\.epoch-2\.safetensors" "$dir/trace/ops.txt" | head -1 | cut -d: -f1)
  last=$(wc -l <"$dir/trace/ops.txt")
  [ "$points" = one ] && last=$first
  for kind in $kinds; do
    survived=0
    for ((n = first; n <= last; n++)); do
      case_dir=$dir/$kind-$n
      mkdir -p "$case_dir"
      spec=$n
      [ "$kind" = enospc ] && spec=$n:enospc
      (EMBER_FAULT_AT=$spec "$train" "${args[@]}" --save "$case_dir/m.safetensors" >"$case_dir/out.txt" \
        2>"$case_dir/err.txt"; exit $?) 2>/dev/null  # the shell's "Killed" line is expected
      code=$?
      cases=$((cases + 1))
      what="$model, $kind at operation $n ($(sed -n "${n}p" "$dir/trace/ops.txt" | cut -d' ' -f2-))"
      if [ "$kind" = kill ] && [ $code != 137 ]; then fail "$what: exit $code, expected death by SIGKILL (137)"; continue; fi
      if [ "$kind" = enospc ]; then
        if [ $code != 1 ]; then fail "$what: exit $code, expected 1"; continue; fi
        grep -q "No space left on device.*\(resume with --resume\|no checkpoint\).*Free some space" "$case_dir/err.txt" ||
          { fail "$what: the message does not say what is resumable: $(head -c 300 "$case_dir/err.txt")"; continue; }
      fi
      "$train" "${args[@]}" --save "$case_dir/m.safetensors" --resume "$case_dir/m.safetensors" >"$case_dir/resume.txt" 2>&1 ||
        { fail "$what: --resume failed: $(tail -2 "$case_dir/resume.txt")"; continue; }
      cmp -s "$dir/ref/m.safetensors" "$case_dir/m.safetensors" ||
        { fail "$what: the resumed run's model differs from the uninterrupted run's"; continue; }
      if ls -a "$case_dir" | grep -q '\.tmp\.'; then fail "$what: a temporary file survived: $(ls -a "$case_dir" | grep '\.tmp\.')"; continue; fi
      survived=$((survived + 1))
      rm -rf "$case_dir"
    done
    echo "ok   $model, $kind: $survived of $((last - first + 1)) points resumed to the uninterrupted run's bytes"
  done
done
echo "checkpoint_faults: $cases cases, $failures failure(s)"
[ $failures -eq 0 ] && [ $cases -gt 0 ]
