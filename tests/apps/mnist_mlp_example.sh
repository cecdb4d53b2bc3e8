#!/usr/bin/env bash
# Runs the README's example (examples/mnist_mlp) as a user would: from a folder whose data/mnist
# holds the MNIST files. It must exit 0, write mnist.safetensors and reach 85% on the test images.
#   mnist_mlp_example.sh MNIST_MLP MNIST_DIR WORK_DIR
set -euo pipefail
program=$1 mnist=$2 work=$3
[ -d "$mnist" ] || { echo "mnist_mlp_example: skipped: no MNIST files in $mnist"; exit 77; }
rm -rf "$work" && mkdir -p "$work/data" && ln -s "$mnist" "$work/data/mnist"
cd "$work"
"$program" | tee out.txt
[ -s mnist.safetensors ] || { echo "mnist_mlp_example: no mnist.safetensors written"; exit 1; }
accuracy=$(sed -n 's/^test accuracy: \([0-9.]*\).*/\1/p' out.txt)
python3 -c "import sys; a = float('${accuracy:-0}'); sys.exit(0 if a > 0.85 else 1)" ||
  { echo "mnist_mlp_example: test accuracy ${accuracy:-missing}, expected above 0.85"; exit 1; }
