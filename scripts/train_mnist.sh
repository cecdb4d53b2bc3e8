#!/usr/bin/env bash
# The main job: installs what is missing, builds ember (Release) and trains the tutorials' MNIST
# classifier on the best device (a CUDA GPU when one is usable, else the CPU) with the defaults.
# The MNIST files are read from --data DIR, else $MNIST_DIR, else data/mnist, which is filled
# when missing by scripts/fetch_mnist.sh (a download with the published checksums; offline, set
# MNIST_DIR to a copy of the files or run scripts/fetch_mnist.sh data/mnist --from DIR first).
# With --dataset fashion-mnist it trains on Fashion-MNIST's 60,000 images instead, installing
# Debian's dataset-fashion-mnist when it is missing.
#   scripts/train_mnist.sh [mnist_train options, e.g. --epochs 10 --lr 0.1, --model cnn,
#                           --dataset fashion-mnist]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
dataset=mnist given_data=0
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --dataset) dataset=${args[$((i + 1))]:-} ;;
    --dataset=*) dataset=${args[$i]#--dataset=} ;;
    --data | --data=*) given_data=1 ;;
  esac
done
data_args=()
case "$dataset" in
  mnist)
    if [ $given_data = 0 ] && [ -z "${MNIST_DIR:-}" ]; then
      scripts/fetch_mnist.sh data/mnist --if-missing
      data_args=(--data data/mnist)
    fi ;;
  fashion-mnist)
    if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
      sudo=""
      [ "$(id -u)" != 0 ] && sudo=sudo
      echo "train_mnist: installing Debian's dataset-fashion-mnist (60,000 + 10,000 images)"
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq dataset-fashion-mnist >/dev/null ||
        { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq dataset-fashion-mnist >/dev/null; }
    fi ;;
esac
build=${EMBER_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target mnist_train mnist_predict
"$build/apps/mnist_train" "${data_args[@]}" "$@"
