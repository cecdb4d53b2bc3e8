#!/usr/bin/env bash
# The main job: installs what is missing, builds ember (Release) and trains the tutorials' MNIST
# classifier on the best device (a CUDA GPU when one is usable, else the CPU) with the defaults.
# The MNIST files are read from $MNIST_DIR, else data/mnist; when neither exists they are copied
# from ../shared/data/mnist if present, else downloaded (scripts/fetch_mnist.sh).
#   scripts/train_mnist.sh [mnist_train options, e.g. --epochs 10 --lr 0.1]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
data=${MNIST_DIR:-data/mnist}
if [ ! -d "$data" ]; then
  if [ -d ../shared/data/mnist ]; then scripts/fetch_mnist.sh "$data" --from ../shared/data/mnist
  else scripts/fetch_mnist.sh "$data"; fi
fi
build=${EMBER_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target mnist_train mnist_predict
"$build/apps/mnist_train" --data "$data" "$@"
