#!/usr/bin/env bash
# mnist_train --model vit from the outside, small and short: the recipe's lines (schedule, label
# smoothing, clipping, augmentation) are printed, a tiny ViT learns (test accuracy well above
# chance after 2 epochs), a stop mid-run resumes to the uninterrupted run's bytes (the per-step
# schedule, the augmentation draws and the attention's dropout stream resume with it), mnist_predict classifies with the saved
# file as mnist_train's test did, and bad ViT flags are refused naming the flag (exit 2).
#   vit_smoke.sh MNIST_TRAIN MNIST_PREDICT MNIST_DIR WORK_DIR
set -u
train=$1 predict=$2 mnist=$3 work=$4
if [ ! -f "$mnist/train-images-idx3-ubyte.gz" ] && [ ! -f "$mnist/train-images-idx3-ubyte" ]; then
  echo "vit_smoke: skipped: no MNIST files in $mnist"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work/ref" "$work/stopped"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/expect.sh"

vit=(--data "$mnist" --model vit --patch 7 --width 16 --depth 1 --heads 2 --mlp-dim 32 --epochs 2 --warmup-epochs 0 --lr 0.004
  --attention-dropout 0.1 --workers 1 --val-size 1000)
"$train" "${vit[@]}" --save "$work/ref/m.safetensors" --json-log "$work/ref/log.jsonl" >"$work/ref/out.txt" 2>&1 ||
  fail "the tiny ViT's run: $(tail -3 "$work/ref/out.txt")"
grep -q "^VisionTransformer($" "$work/ref/out.txt" && pass "the model printed as torchvision's VisionTransformer" ||
  fail "no VisionTransformer in the summary"
grep -q "^recipe: AdamW, lr 0.004 then cosine, .*label smoothing 0.1, gradients clipped to norm 1, random crops (padding 2) (set by" \
  "$work/ref/out.txt" && pass "the recipe line" || fail "recipe line: $(grep '^recipe' "$work/ref/out.txt")"
grep -q "^data: training images augmented: random crop (padding 2)$" "$work/ref/out.txt" && pass "augmentation said" ||
  fail "no augmentation line"
grep -q "^training step: autograd, op by op, CrossEntropyLoss(label_smoothing=0.1), gradients clipped to norm 1; not the fused MLP step: the model is a VisionTransformer" "$work/ref/out.txt" &&
  pass "the step smooths and clips, and says why it is not the fused one" ||
  fail "step line: $(grep '^training step' "$work/ref/out.txt")"
accuracy=$(grep -o '"test_acc":[0-9.]*' "$work/ref/log.jsonl" | cut -d: -f2)
awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.3) }' && pass "it learns: test accuracy $accuracy after 2 epochs" ||
  fail "test accuracy $accuracy (at least 0.3 expected; chance is 0.1)"

# A stop and a resume end at the uninterrupted run's bytes.
"$train" "${vit[@]}" --save "$work/stopped/m.safetensors" >"$work/stopped/out.txt" 2>"$work/stopped/err.txt" &
pid=$!
while [ ! -f "$work/stopped/m.epoch-1.state.safetensors" ] && kill -0 $pid 2>/dev/null; do sleep 0.05; done
sleep 0.1
kill -s TERM $pid 2>/dev/null
wait $pid
grep -q "^stopped by SIGTERM at epoch 1, step [1-9]" "$work/stopped/err.txt" && pass "stopped mid-epoch 1" ||
  fail "not stopped mid-epoch: $(cat "$work/stopped/err.txt")"
"$train" "${vit[@]}" --save "$work/stopped/m.safetensors" --resume "$work/stopped/m.safetensors" \
  >"$work/stopped/resume.txt" 2>&1 || fail "resume: $(tail -2 "$work/stopped/resume.txt")"
cmp -s "$work/ref/m.safetensors" "$work/stopped/m.safetensors" && pass "stopped and resumed: byte-identical" ||
  fail "the resumed run's model differs from the uninterrupted one's"

# mnist_predict reads the ViT's file (its card: model_kind vit, heads) and agrees with training.
"$predict" --model "$work/ref/m.safetensors" --idx "$mnist/t10k-images-idx3-ubyte.gz" --count 200 --json \
  >"$work/predict.jsonl" 2>"$work/predict.err" || fail "mnist_predict: $(cat "$work/predict.err")"
right=$(python3 -c "
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print(sum(r['prediction'] == r['label'] for r in rows), len(rows))" "$work/predict.jsonl")
read -r correct total <<<"$right"
# Its accuracy on 200 test images is the training's test accuracy within 0.1 (about three binomial
# standard deviations at n = 200): the saved model is the trained one, whatever the CPU's rounding.
[ "$total" = 200 ] && awk -v c="$correct" -v a="$accuracy" 'BEGIN { d = c / 200 - a; exit !(d <= 0.1 && d >= -0.1) }' &&
  pass "mnist_predict with the ViT: $correct of 200 right (training's test accuracy $accuracy)" ||
  fail "mnist_predict with the ViT: $correct of $total right, training's test accuracy $accuracy"

# Bad sizes: exit 2 naming the flag, before any data is read.
expect_usage() {
  local what=$1 pattern=$2
  shift 2
  "$train" --data "$mnist" --model vit "$@" >/dev/null 2>"$work/err.txt"
  local code=$?
  [ $code = 2 ] && grep -q -- "$pattern" "$work/err.txt" && pass "$what: exit 2, names $pattern" ||
    fail "$what: exit $code, $(cat "$work/err.txt")"
}
expect_usage "heads not dividing the width" "--width a multiple of --heads" --width 30 --heads 4
expect_usage "a patch not dividing 28" "--patch 5 must divide" --patch 5
expect_usage "a warm-up as long as the run" "--warmup-epochs" --epochs 3 --warmup-epochs 3
expect_usage "augmentation with --preload" "--preload" --preload
expect_usage "attention dropout of 1" "--attention-dropout must be in \[0, 1)" --attention-dropout 1
echo "vit_smoke: $failures failure(s)"
[ $failures = 0 ]
