#!/usr/bin/env bash
# The CNN's default recipe: `mnist_train --model cnn --val-size 0` with no other flag (5 epochs)
# reaches at least 98% test accuracy on the shared digits, and says which recipe it used. A long
# test (about two minutes on one core): left out of the sanitizer runs by its label.
#   cnn_recipe.sh MNIST_TRAIN MNIST_DIR WORK_DIR
set -u
train=$1 mnist=$2 work=$3
if [ ! -f "$mnist/train-images-idx3-ubyte.gz" ]; then
  echo "cnn_recipe: skipped: no MNIST files in $mnist"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
"$train" --data "$mnist" --model cnn --val-size 0 --json-log "$work/log.jsonl" | tee "$work/out.txt" || exit 1
grep -q "^recipe: Adam, lr 0.002 ×0.6 per epoch, batch 64, 5 epochs, normalized inputs (the cnn default)" "$work/out.txt" ||
  { echo "cnn_recipe: FAIL: the start-up lines do not show the CNN's recipe"; exit 1; }
accuracy=$(grep -o '"test_acc":[0-9.]*' "$work/log.jsonl" | cut -d: -f2)
echo "cnn_recipe: test accuracy $accuracy (at least 0.98 expected)"
awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.98) }'
