#!/usr/bin/env bash
# mnist_train and mnist_predict from the outside: bad input gets "error: ..." naming the option or
# file, exit code 2, and nothing written; a resumed run equals an uninterrupted one bit for bit, from
# a checkpoint pair or an ember 0.1 single file, and a pair that does not belong together is refused;
# one seed gives one run; a non-finite loss stops training and keeps the last good checkpoint;
# Fashion-MNIST trains and its predictions are named; hostile image files (a decompression bomb, a
# header claiming 30,000×30,000 pixels, a truncated JPEG, an empty file, a folder) are refused with
# exit 2, naming the file, within 50 MiB of the memory a valid 28×28 PNG takes.
#   cli_tests.sh MNIST_TRAIN MNIST_PREDICT MNIST_DIR WORK_DIR [FASHION_MNIST_DIR]
set -u
train=$1 predict=$2 mnist=$3 work=$4 fashion=${5:-/usr/share/datasets/fashion-mnist}
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "$mnist/train-images-idx3-ubyte.gz" ]; then
  echo "cli_tests: skipped: no MNIST files in $mnist"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
source "$here/expect.sh"

quick=(--epochs 1 --workers 0 --hidden 16)
save="$work/should-not-exist.safetensors" log="$work/should-not-exist.jsonl"

# ---- bad input: exit 2, a message naming the problem, nothing written -------------------------
expect 2 "looked for train-images-idx3-ubyte and train-images-idx3-ubyte.gz" "missing data folder" -- \
  "$train" --data "$work/no-such-folder" --save "$save" --json-log "$log"
grep -q "scripts/fetch_mnist.sh" "$work/err.txt" && pass "missing data: says how to get the files" || fail "missing data: no hint"
mkdir -p "$work/broken"
cp "$mnist"/*labels* "$mnist"/t10k-images* "$work/broken/"
head -c 100000 "$mnist/train-images-idx3-ubyte.gz" >"$work/broken/train-images-idx3-ubyte.gz"
expect 2 "train-images-idx3-ubyte.gz: not a valid IDX file: corrupt gzip stream" "truncated data file" -- \
  "$train" --data "$work/broken" --save "$save"
expect 2 "invalid device 'tpu'" "unknown device" -- "$train" --data "$mnist" --device tpu --save "$save"
expect 2 "epochs" "zero epochs" -- "$train" --data "$mnist" --epochs 0 --save "$save"
expect 2 "batch-size" "zero batch size" -- "$train" --data "$mnist" --batch-size 0 --save "$save"
expect 2 "--lr must be a positive number" "zero learning rate" -- "$train" --data "$mnist" --lr 0 --save "$save"
expect 2 "--lr must be a positive number" "negative learning rate" -- "$train" --data "$mnist" --lr -0.5 --save "$save"
expect 2 "--hidden 32,0" "zero layer width" -- "$train" --data "$mnist" --hidden 32,0 --save "$save"
expect 2 "--val-size 10000" "validation split too large" -- "$train" --data "$mnist" --val-size 10000 --save "$save"
expect 2 "--init .*no such checkpoint file" "missing --init file" -- "$train" --data "$mnist" --init "$work/none.safetensors" --save "$save"
echo "not a checkpoint" >"$work/garbage.safetensors"
expect 2 "--resume .*not a valid safetensors checkpoint" "corrupt --resume file" -- \
  "$train" --data "$mnist" --resume "$work/garbage.safetensors" --save "$save"
"$train" --data "$mnist" "${quick[@]}" --save "$work/h16.safetensors" >/dev/null || fail "training a small model"
expect 2 "size mismatch for 0.weight" "--init of another architecture" -- \
  "$train" --data "$mnist" --hidden 32 --init "$work/h16.safetensors" --save "$save"
expect 2 "the checkpoint was saved with --hidden 16, this run has 64" "--resume of another architecture" -- \
  "$train" --data "$mnist" --hidden 64 --resume "$work/h16.safetensors" --save "$save" --epochs 2
expect 2 "--precision: f64 not in {f32,bf16,f16}" "unknown precision" -- "$train" --data "$mnist" --precision f64 --save "$save"
expect 2 "--step fused: bf16 runs on CUDA" "--precision bf16 with the fused step on the CPU" -- \
  "$train" --data "$mnist" --device cpu --precision bf16 --step fused --save "$save"
expect 2 "--step fused: f16 needs loss scaling" "--precision f16 with the fused step" -- \
  "$train" --data "$mnist" --precision f16 --step fused --save "$save"
expect 2 "--dataset: cifar not in {mnist,fashion-mnist,idx}" "unknown dataset" -- "$train" --dataset cifar --save "$save"
expect 2 "--dataset idx has no default folder" "--dataset idx without --data" -- "$train" --dataset idx --save "$save"
# Four IDX files that do not make one dataset: written by hand (big-endian header, then bytes).
byte() { printf "\\x$(printf %02x "$1")"; }
idx_file() {  # idx_file PATH DIMS... — a u8 payload of the product of DIMS: 1s, or 5s for labels
  local path=$1 n=1 d
  shift
  { byte 0; byte 0; byte 8; byte $#
    for d in "$@"; do byte $((d >> 24 & 255)); byte $((d >> 16 & 255)); byte $((d >> 8 & 255)); byte $((d & 255)); n=$((n * d)); done
    for ((d = 0; d < n; d++)); do byte $([ $# = 1 ] && echo 5 || echo 1); done; } >"$path"
}
mkdir -p "$work/sizes" "$work/labels"
idx_file "$work/sizes/train-images-idx3-ubyte" 2 6 6
{ idx_file /dev/stdout 2 | head -c 8; byte 0; byte 7; } >"$work/sizes/train-labels-idx1-ubyte"
idx_file "$work/sizes/t10k-images-idx3-ubyte" 1 7 7
idx_file "$work/sizes/t10k-labels-idx1-ubyte" 1
expect 2 "sizes/t10k-images-idx3-ubyte: its images are 7×7 pixels but those of" "test images of another size" -- \
  "$train" --dataset idx --data "$work/sizes" --save "$save"
cp "$work/sizes/train-"* "$work/labels/"
idx_file "$work/labels/t10k-images-idx3-ubyte" 1 6 6
{ idx_file /dev/stdout 1 | head -c 8; byte 9; } >"$work/labels/t10k-labels-idx1-ubyte"
expect 2 "labels/t10k-labels-idx1-ubyte: label 9 at index 0 is not a class of the training set" \
  "a test label beyond the training classes" -- "$train" --dataset idx --data "$work/labels" --save "$save"
printf 'zero\n' >"$work/labels/classes.txt"
idx_file "$work/labels/t10k-labels-idx1-ubyte" 1
expect 2 "labels/classes.txt: names 1 classes, but the training labels" "classes.txt that does not fit" -- \
  "$train" --dataset idx --data "$work/labels" --save "$save"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then :; else
  expect 2 "--device cuda: cannot use cuda:0" "CUDA asked for where there is none" -- \
    "$train" --data "$mnist" --device cuda --save "$save"
fi
[ ! -e "$save" ] && [ ! -e "$log" ] && pass "nothing written on bad input" || fail "a file was written on bad input"
ls "$work"/.*.tmp.* >/dev/null 2>&1 && fail "temporary files left behind" || pass "no temporary files left behind"

# ---- what a person reads: ranges, --device, a PNG's claimed size, a missing data folder ---------
# Ranges name the option and the value in words (CLI11's own checks print their bounds as 309-digit
# numbers), in every program; no program keeps CLI11's range checks.
expect 2 "^error: --epochs: 0 is not a positive number$" "--epochs 0, in words" -- "$train" --data "$mnist" --epochs 0 --save "$save"
expect 2 "^error: --val-size: -1 is negative (expected 0 or more)$" "--val-size -1, in words" -- \
  "$train" --data "$mnist" --val-size -1 --save "$save"
expect 2 "^error: --weight-decay: -0.5 is negative (expected 0 or more)$" "--weight-decay -0.5, in words" -- \
  "$train" --data "$mnist" --weight-decay -0.5 --save "$save"
programs=$(dirname "$train")
for check in "bench_devices --threads" "bench_loader --batch-size" "bench_kernels --repeat"; do
  program=${check%% *} option=${check#* }
  if [ -x "$programs/$program" ]; then
    expect 2 "^error: $option: 0 is not a positive number$" "$program $option 0, in words" -- "$programs/$program" "$option" 0
  else
    echo "skip $program $option 0: $programs/$program is not built"
  fi
done
if grep -n "CLI::\(PositiveNumber\|NonNegativeNumber\|Range\|Bound\)" "$here"/../../apps/*.cpp >"$work/ranges.txt"; then
  fail "CLI11's range checks print 309-digit bounds; use apps::positive or apps::non_negative: $(cat "$work/ranges.txt")"
else
  pass "no program uses CLI11's range checks"
fi
# --device cuda without a usable GPU: the options to give instead, not the library's Device::best().
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then :; else
  expect 2 "^error: --device cuda: cannot use cuda:0: .*; use --device auto or --device cpu$" \
    "--device cuda without a GPU: says to use --device auto or cpu" -- "$train" --data "$mnist" --device cuda --save "$save"
  grep -q "Device::best" "$work/err.txt" && fail "--device cuda: the message names a library call" ||
    pass "--device cuda: no library call in the message"
fi
# A 20000×20000 RGB or palette PNG: stb_image's header reader calls it corrupt (over its own 2^30
# bytes), so the size is read first and the pixel limit named, as for 30000×30000.
for color in 2 3; do
  python3 -c 'import struct, sys, zlib
def chunk(kind, body): return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
sys.stdout.buffer.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 20000, 20000, 8, int(sys.argv[1]), 0, 0, 0)) +
                        chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))' $color >"$work/big$color.png"
  expect 2 "big$color.png: the PNG claims 20000×20000 pixels (400000000), more than the limit of 16777216" \
    "a 20000×20000 PNG of colour type $color: the pixel limit, not a corrupt header" -- \
    "$predict" --model "$work/h16.safetensors" "$work/big$color.png"
done
# A missing data folder: one sentence naming the folder, what was looked for, and how to get the files.
missing="^error: the data folder $work/no-such-folder does not exist (looked for train-images-idx3-ubyte and \
train-images-idx3-ubyte.gz in it): get the four MNIST files with scripts/fetch_mnist.sh $work/no-such-folder (or \
--from a local copy), or point --data or \$MNIST_DIR at a folder that has them$"
expect 2 "$missing" "missing --data folder: one sentence naming it and the fix" -- \
  "$train" --data "$work/no-such-folder" --save "$save"
[ "$(wc -l <"$work/err.txt")" = 1 ] && pass "missing --data folder: one line" || fail "missing --data folder: $(cat "$work/err.txt")"
expect 2 "$missing" "missing \$MNIST_DIR folder: the same sentence" -- \
  env MNIST_DIR="$work/no-such-folder" "$train" --save "$save"

# ---- mnist_predict -----------------------------------------------------------------------------
expect 2 "--model is required" "predict without --model" -- "$predict" "$work/x.png"
expect 2 "--model .*not a valid safetensors checkpoint" "predict with a corrupt model" -- \
  "$predict" --model "$work/garbage.safetensors" "$work/x.png"
seeds="$here/../fuzz/seeds/image"  # PNG, JPEG and BMP digits, and inputs rebuilt from stb_image's reports
cp "$seeds/png_gray8.png" "$work/good.png"
printf '\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDRtruncated' >"$work/corrupt.png"
expect 2 "corrupt.png: cannot read the image" "a corrupt image among good ones" -- \
  "$predict" --model "$work/h16.safetensors" "$work/corrupt.png" "$work/good.png"
grep -q "good.png: " "$work/out.txt" && pass "the other images are still classified" || fail "good image not classified"
printf 'P5\n2 2\n255\n\x00\xff\xff\x00' >"$work/digit.pgm"
expect 2 "digit.pgm is a PNM (Netpbm) image; mnist_predict reads PNG, JPEG and BMP" "a PGM is refused by name" -- \
  "$predict" --model "$work/h16.safetensors" "$work/digit.pgm"
expect 0 "" "predict --help" -- "$predict" --help
grep -q "PNG, JPEG and BMP" "$work/out.txt" && grep -q -- "--max-pixels" "$work/out.txt" && grep -q "4096×4096" "$work/out.txt" &&
  pass "predict --help names the formats and the pixel limit" || fail "predict --help lacks the formats or the limit"

# ---- hostile images: exit 2 naming the file, memory within 50 MiB of a valid 28×28 PNG's ---------
# measured COMMAND...: runs it (stdout and stderr to out.txt and err.txt), sets $code to its exit
# code and $peak to its peak resident memory in KiB (getrusage's maxrss of the waited-for child).
measured() {
  read -r code peak < <(python3 -c 'import resource, subprocess, sys
with open(sys.argv[1], "w") as out, open(sys.argv[2], "w") as err:
    code = subprocess.run(sys.argv[3:], stdout=out, stderr=err).returncode
print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$work/out.txt" "$work/err.txt" "$@")
}
measured "$predict" --model "$work/h16.safetensors" "$work/good.png"
valid_peak=$peak
[ "$code" = 0 ] && pass "a valid 28×28 PNG: classified, peak memory $((peak / 1024)) MiB" || fail "valid PNG: exit $code"
cp "$seeds/poc_gif_bomb_16384x16448.gif" "$work/bomb.gif"  # 98 bytes claiming 16,384×16,448 pixels
cp "$seeds/poc_png_30000x30000.png" "$work/huge.png"
head -c 500 "$seeds/jpeg_gray.jpg" >"$work/truncated.jpg"
: >"$work/empty.png"
mkdir -p "$work/folder.png"
# A 28×28 PNG whose data inflate to 256 MiB (a 256 KiB file).
python3 -c 'import struct, sys, zlib
def chunk(kind, body): return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
z = zlib.compressobj(9)
data = b"".join(z.compress(bytes(1 << 20)) for _ in range(256)) + z.flush()
sys.stdout.buffer.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 28, 28, 8, 0, 0, 0, 0)) +
                        chunk(b"IDAT", data) + chunk(b"IEND", b""))' >"$work/inflating.png"
for case in "bomb.gif|bomb.gif is a GIF image; mnist_predict reads PNG, JPEG and BMP" \
  "huge.png|huge.png: the PNG claims 30000×30000 pixels (900000000), more than the limit of 16777216" \
  "truncated.jpg|truncated.jpg: the JPEG ends before its end-of-image marker" \
  "empty.png|empty.png: the file is empty" "folder.png|folder.png: is a folder" \
  "inflating.png|inflating.png: decoding the 28×28 PNG would take more than 1 MiB"; do
  file=${case%%|*} pattern=${case#*|}
  measured "$predict" --model "$work/h16.safetensors" "$work/$file"
  if [ "$code" != 2 ]; then fail "$file: exit $code, expected 2 ($(head -c 300 "$work/err.txt"))"
  elif ! grep -q -- "$pattern" "$work/err.txt"; then fail "$file: stderr lacks '$pattern': $(head -c 300 "$work/err.txt")"
  elif [ "$peak" -gt $((valid_peak + 50 * 1024)) ]; then fail "$file: peak memory $((peak / 1024)) MiB, over 50 MiB above the valid PNG's"
  else pass "$file: refused, exit 2, peak memory $((peak / 1024)) MiB"; fi
done
# All of them in one call, the valid one among them: decoded one at a time, memory stays as low.
measured "$predict" --model "$work/h16.safetensors" "$work"/{bomb.gif,huge.png,truncated.jpg,empty.png,folder.png,inflating.png,good.png}
[ "$code" = 2 ] && [ "$(grep -c '^error: ' "$work/err.txt")" = 6 ] && grep -q "good.png: " "$work/out.txt" &&
  [ "$peak" -le $((valid_peak + 50 * 1024)) ] && pass "six hostile files and a good one in one call: peak $((peak / 1024)) MiB" ||
  fail "six hostile files and a good one: exit $code, peak $((peak / 1024)) MiB, $(head -c 300 "$work/err.txt")"
expect 2 "good.png: the PNG claims 28×28 pixels (784), more than the limit of 783" "--max-pixels lowers the limit" -- \
  "$predict" --model "$work/h16.safetensors" --max-pixels 783 "$work/good.png"
expect 2 "--max-pixels must be positive" "--max-pixels 0" -- "$predict" --model "$work/h16.safetensors" --max-pixels 0 "$work/good.png"

# ---- mnist_predict: model files it refuses, and what --index and --count reach -----------------
# Weights with a NaN, weights whose products overflow float, and a file of no model ember builds:
# exit 2, naming the file and the tensor or input (not "0 (nan)"); a range past an IDX file's end
# is named as typed; --normalize takes MEAN,STD.
if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  /usr/bin/python3 - "$here/../interop" "$work/h16.safetensors" "$work" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import safetensors_lite
tensors, meta = safetensors_lite.load(sys.argv[2])
work = sys.argv[3]
nan = dict(tensors, **{"0.weight": tensors["0.weight"].copy()})
nan["0.weight"][3, 5] = np.nan
safetensors_lite.save(f"{work}/nan.safetensors", nan, meta)
safetensors_lite.save(f"{work}/overflow.safetensors", dict(tensors, **{"0.weight": np.full_like(tensors["0.weight"], 3e38)}), meta)
safetensors_lite.save(f"{work}/foreign.safetensors", {"features.0.weight": np.zeros((4, 1, 3, 3), np.float32),
                                                      "classifier.weight": np.zeros((10, 16), np.float32)}, {})
PY
  expect 2 "^error: --model .*/nan.safetensors: tensor 0.weight holds NaN or infinite values$" \
    "predict refuses NaN weights, naming the tensor" -- "$predict" --model "$work/nan.safetensors" "$work/good.png"
  expect 2 "overflow.safetensors: the model's outputs for .*good.png are not finite (NaN or infinite)" \
    "predict refuses non-finite outputs, naming the input" -- "$predict" --model "$work/overflow.safetensors" "$work/good.png"
  grep -q "(nan)" "$work/out.txt" && fail "non-finite outputs: a prediction was printed" || pass "non-finite outputs: no prediction printed"
  expect 2 "^error: --init .*/nan.safetensors: tensor 0.weight holds NaN or infinite values$" \
    "--init refuses NaN weights, naming the tensor (not 'Try a smaller --lr')" -- \
    "$train" --data "$mnist" "${quick[@]}" --init "$work/nan.safetensors"
  expect 2 "foreign.safetensors: not a model ember can build: the file holds features.0.weight \[4, 1, 3, 3\], classifier.weight \[10, 16\] (2 tensors)\. ember builds an MLP .*pytorch/examples' MNIST Net" \
    "an unrecognised model file: what it holds and what ember reads" -- "$predict" --model "$work/foreign.safetensors" "$work/good.png"
else
  fail "numpy (python3-numpy) is needed to write the refused model files"
fi
"$train" --data "$mnist" "${quick[@]}" --batch-size 10000000 --val-size 9000 >"$work/out.txt" 2>&1 &&
  grep -q "note: --batch-size 10000000: more than the 1000 images trained on; using 1000" "$work/out.txt" &&
  pass "--batch-size 10000000: one batch of the 1000 images, said" || fail "--batch-size 10000000: $(tail -2 "$work/out.txt")"
t10k="$mnist/t10k-images-idx3-ubyte.gz"
expect 2 "^error: --index 9999 with --count 2 reaches image 10000, past the last of .*'s 10000 images (9999): the last start for --count 2 is 9998$" \
  "--index and --count past the end: the values typed, and the last start" -- \
  "$predict" --model "$work/h16.safetensors" --idx "$t10k" --index 9999 --count 2
expect 0 "" "--index 9998 --count 2: the last two images" -- "$predict" --model "$work/h16.safetensors" --idx "$t10k" --index 9998 --count 2
[ "$(grep -c "ubyte.gz\[999[89]\]" "$work/out.txt")" = 2 ] && pass "--index 9998 --count 2 classifies images 9998 and 9999" ||
  fail "--index 9998 --count 2: $(cat "$work/out.txt")"
grep -q "^warning:" "$work/err.txt" && fail "a warning for a file that records its scaling" || pass "no scaling warning for mnist_train's file"
expect 2 "^error: --count 10001 with --index 0: .* has only 10000 images; give --count 10000 at most$" "--count past the file" -- \
  "$predict" --model "$work/h16.safetensors" --idx "$t10k" --count 10001
expect 2 "^error: --normalize 0,0: expected MEAN,STD with STD positive" "--normalize with a zero std" -- \
  "$predict" --model "$work/h16.safetensors" --normalize 0,0 "$work/good.png"

# ---- --help documents every option -------------------------------------------------------------
"$train" --help >"$work/help.txt"
missing=""
for option in --dataset --data --device --model --hidden --epochs --batch-size --eval-batch-size --lr --optimizer --momentum \
  --weight-decay --lr-decay --channels --seed --no-shuffle --workers --threads --val-size --normalize --json-log \
  --no-normalize --save --resume --init --plot; do
  grep -q -- "$option" "$work/help.txt" || missing="$missing $option"
done
[ -z "$missing" ] && pass "--help documents every option" || fail "--help lacks:$missing"

# ---- resume: 2 epochs + --resume for 2 more equals 4 uninterrupted epochs, bit for bit ----------
common=(--data "$mnist" --hidden 32 --workers 2 --momentum 0.9 --lr 0.1)
"$train" "${common[@]}" --epochs 4 --save "$work/straight.safetensors" --json-log "$work/run1.jsonl" >/dev/null &&
  "$train" "${common[@]}" --epochs 2 --save "$work/half.safetensors" >/dev/null &&
  "$train" "${common[@]}" --epochs 4 --resume "$work/half.safetensors" --save "$work/resumed.safetensors" >/dev/null ||
  fail "resume runs"
cmp -s "$work/straight.safetensors" "$work/resumed.safetensors" && pass "resume after epoch 2 gives bit-identical weights" ||
  fail "resumed run differs from the uninterrupted one"
[ -f "$work/half.epoch-2.safetensors" ] && [ -f "$work/half.epoch-2.state.safetensors" ] &&
  [ "$work/half.safetensors" -ef "$work/half.epoch-2.safetensors" ] &&
  pass "--save keeps numbered pairs, the stable name linked to the newest" || fail "--save's files: $(ls "$work" | grep half)"
# One numbered checkpoint by its name (the state's, or the model's).
"$train" "${common[@]}" --epochs 4 --resume "$work/half.epoch-1.state.safetensors" --save "$work/resumed2.safetensors" \
  >"$work/out.txt" && grep -q "resuming from half.epoch-1.safetensors (epoch 1)" "$work/out.txt" &&
  cmp -s "$work/straight.safetensors" "$work/resumed2.safetensors" && pass "resume from a numbered checkpoint's name" ||
  fail "resume from a numbered checkpoint: $(head -3 "$work/out.txt")"
# ember 0.2's pair (m and m.state beside it) and ember 0.1's single file (model, "optimizer." tensors,
# all metadata) still resume, bit for bit.
cp "$work/half.epoch-2.safetensors" "$work/pair.safetensors"
cp "$work/half.epoch-2.state.safetensors" "$work/pair.state.safetensors"
"$train" "${common[@]}" --epochs 4 --resume "$work/pair.safetensors" --save "$work/resumed-pair.safetensors" >/dev/null &&
  cmp -s "$work/straight.safetensors" "$work/resumed-pair.safetensors" && pass "an ember 0.2 pair resumes bit-identically" ||
  fail "ember 0.2 pair resume"
if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  /usr/bin/python3 - "$here/../interop" "$work/pair.safetensors" "$work/pair.state.safetensors" "$work/single.safetensors" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import safetensors_lite
model, model_meta = safetensors_lite.load(sys.argv[2])
state, state_meta = safetensors_lite.load(sys.argv[3])
for key in ("format", "model_file", "model_sha256", "ember_version"):
    state_meta.pop(key, None)
safetensors_lite.save(sys.argv[4], {**model, **state}, {**model_meta, **state_meta, "format": "ember"})
PY
  "$train" "${common[@]}" --epochs 4 --resume "$work/single.safetensors" --save "$work/resumed-single.safetensors" >/dev/null &&
    cmp -s "$work/straight.safetensors" "$work/resumed-single.safetensors" &&
    pass "an ember 0.1 single-file checkpoint resumes bit-identically" || fail "single-file checkpoint resume"
  "$train" --data "$mnist" --hidden 32 --epochs 1 --init "$work/single.safetensors" >/dev/null &&
    pass "--init takes a single-file checkpoint" || fail "--init of a single-file checkpoint"
else
  fail "numpy (python3-numpy) is needed to write an ember 0.1 checkpoint"
fi
# Another run's state beside this model: refused, naming both files; nothing is overwritten.
"$train" "${common[@]}" --epochs 3 --seed 5 --save "$work/other.safetensors" >/dev/null || fail "other run"
cp "$work/other.epoch-3.state.safetensors" "$work/pair.state.safetensors"
cp "$work/pair.safetensors" "$work/pair-before.safetensors"
expect 2 "pair.safetensors and .*pair.state.safetensors do not belong together" "a state from another run" -- \
  "$train" "${common[@]}" --epochs 4 --resume "$work/pair.safetensors" --save "$work/pair.safetensors"
cmp -s "$work/pair.safetensors" "$work/pair-before.safetensors" && pass "the refused pair is left as it was" ||
  fail "the refused pair was overwritten"
rm "$work/pair.state.safetensors"
expect 2 "no training state beside it.*use --init" "a model file without its state" -- \
  "$train" "${common[@]}" --epochs 4 --resume "$work/pair.safetensors"

# ---- one seed, one run: the per-epoch figures repeat exactly ------------------------------------
"$train" "${common[@]}" --epochs 4 --json-log "$work/run2.jsonl" >/dev/null || fail "second run"
figures() { grep -o '"\(train_loss\|val_loss\|val_acc\|test_loss\|test_acc\)":[^,}]*' "$1"; }
[ -n "$(figures "$work/run1.jsonl")" ] && [ "$(figures "$work/run1.jsonl")" = "$(figures "$work/run2.jsonl")" ] &&
  pass "same seed, same per-epoch figures" || fail "per-epoch figures differ between identical runs"

# ---- bf16 without AVX512-BF16 (EMBER_NO_AVX512_BF16=1): products in f32, trained alike ----------
EMBER_NO_AVX512_BF16=1 "$train" --data "$mnist" "${quick[@]}" --precision bf16 --json-log "$work/bf16.jsonl" \
  >"$work/bf16.txt" || fail "bf16 training without AVX512-BF16"
grep -q "bf16 autocast (products in f32: no AVX512-BF16)" "$work/bf16.txt" &&
  pass "EMBER_NO_AVX512_BF16=1: the fallback, named" || fail "EMBER_NO_AVX512_BF16=1: $(grep 'training step' "$work/bf16.txt")"
grep -q '"test_acc":0\.[7-9]' "$work/bf16.jsonl" && pass "bf16 without AVX512-BF16 trains (test accuracy over 0.7)" ||
  fail "bf16 without AVX512-BF16: $(grep test_acc "$work/bf16.jsonl")"

# ---- a non-finite loss stops training, names the epoch and step, keeps the last good checkpoint -
"$train" --data "$mnist" "${quick[@]}" --save "$work/good.safetensors" >/dev/null || fail "a checkpoint to go wrong from"
cp "$work/good.epoch-1.safetensors" "$work/good-before.safetensors"
expect 1 "non-finite training loss.* in epoch 1, step" "non-finite loss" -- \
  "$train" --data "$mnist" --hidden 16 --workers 0 --epochs 3 --lr 1e30 --resume "$work/good.safetensors" \
  --save "$work/good.safetensors"
grep -q "the newest complete checkpoint is good.epoch-1.safetensors (epoch 1): resume with --resume" "$work/err.txt" &&
  pass "the message points at the last good checkpoint" || fail "no checkpoint hint: $(cat "$work/err.txt")"
cmp -s "$work/good-before.safetensors" "$work/good.epoch-1.safetensors" && pass "the last good checkpoint is intact" ||
  fail "the checkpoint was overwritten"
expect 1 "non-finite training loss.*nothing was saved (no --save)" "non-finite loss without --save names no file" -- \
  "$train" --data "$mnist" --hidden 16 --workers 0 --epochs 1 --lr 1e30

# ---- any IDX dataset: 10×12 images, three named classes, both models -----------------------------
mkdir -p "$work/tiny"
for split in train t10k; do
  idx_file "$work/tiny/$split-images-idx3-ubyte" 12 10 12
  { idx_file /dev/stdout 12 | head -c 8; for ((k = 0; k < 12; k++)); do byte $((k % 3)); done; } \
    >"$work/tiny/$split-labels-idx1-ubyte"
done
printf 'circle\nsquare\ntriangle\n' >"$work/tiny/classes.txt"
for model in mlp cnn; do
  "$train" --dataset idx --data "$work/tiny" --model $model --hidden 8 --channels 2,3 --epochs 1 --val-size 0 \
    --workers 0 --save "$work/tiny-$model.safetensors" >"$work/out.txt" 2>&1 &&
    grep -q "12 test images, 3 classes" "$work/out.txt" &&
    "$predict" --model "$work/tiny-$model.safetensors" --idx "$work/tiny/t10k-images-idx3-ubyte" --index 1 >"$work/out.txt" &&
    grep -q "label: square" "$work/out.txt" && pass "--dataset idx: 10×12 images, 3 named classes, $model" ||
    fail "--dataset idx with $model: $(tail -3 "$work/out.txt")"
done

# ---- Fashion-MNIST: trains on all 60,000 images, predictions are named -------------------------
if [ -f "$fashion/train-images-idx3-ubyte.gz" ]; then
  "$train" --dataset fashion-mnist --data "$fashion" --epochs 1 --workers 0 --save "$work/fashion.safetensors" \
    >"$work/fashion.txt" 2>&1 || fail "training on Fashion-MNIST: $(tail -3 "$work/fashion.txt")"
  grep -q "data: Fashion-MNIST, 60000 training images" "$work/fashion.txt" && pass "Fashion-MNIST: all 60,000 images" ||
    fail "Fashion-MNIST: $(grep '^data:' "$work/fashion.txt")"
  "$predict" --model "$work/fashion.safetensors" --idx "$fashion/t10k-images-idx3-ubyte.gz" --index 0 >"$work/out.txt" &&
    grep -q "label: Ankle boot" "$work/out.txt" && grep -Eq ": (T-shirt/top|Trouser|Pullover|Dress|Coat|Sandal|Shirt|Sneaker|Bag|Ankle boot) \(" "$work/out.txt" &&
    pass "mnist_predict names Fashion-MNIST's classes" || fail "class names: $(cat "$work/out.txt")"
  "$predict" --model "$work/fashion.safetensors" --idx "$fashion/t10k-images-idx3-ubyte.gz" --index 0 --json >"$work/out.txt" &&
    grep -q '"class":"' "$work/out.txt" && grep -q '"prediction":[0-9]' "$work/out.txt" &&
    pass "--json keeps the class number beside the name" || fail "--json: $(cat "$work/out.txt")"
else
  echo "skip Fashion-MNIST checks: no files in $fashion (Debian package dataset-fashion-mnist)"
fi

echo "cli_tests: $failures failure(s)"
[ $failures -eq 0 ]
