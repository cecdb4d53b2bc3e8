#!/usr/bin/env python3
"""Whole training runs of mnist_train on the software GPU, each against the same run on the CPU.

On a few thousand of the shared digits (written as IDX files of their own), the same binary trains
with --device cuda (the simulated GPU) and --device cpu, and the per-epoch training losses must
agree. The fused MLP step must have been captured in a CUDA graph and replayed for at least ten
steps, its graph holding exactly the kernels the step says it issues; the autograd path, the
CNN (through the cuDNN model) and a tiny ViT must agree with the CPU too.

    sim_training.py MNIST_TRAIN MNIST_DIR WORK_DIR
Exit 77 (skipped) without the MNIST files.
"""
import gzip
import json
import os
import subprocess
import sys


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.read()


def find(folder, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    return None


def write_subset(source, target, train_count, test_count):
    """The first images of each split, as four IDX files in MNIST's layout."""
    os.makedirs(target, exist_ok=True)
    for split, count in (("train", train_count), ("t10k", test_count)):
        images = read_idx(find(source, f"{split}-images-idx3-ubyte"))
        labels = read_idx(find(source, f"{split}-labels-idx1-ubyte"))
        rows, cols = int.from_bytes(images[8:12], "big"), int.from_bytes(images[12:16], "big")
        with open(os.path.join(target, f"{split}-images-idx3-ubyte"), "wb") as f:
            f.write(images[:4] + count.to_bytes(4, "big") + images[8:16] + images[16:16 + count * rows * cols])
        with open(os.path.join(target, f"{split}-labels-idx1-ubyte"), "wb") as f:
            f.write(labels[:4] + count.to_bytes(4, "big") + labels[8:8 + count])


def train(binary, data, work, name, device, flags):
    log = os.path.join(work, f"{name}-{device}.jsonl")
    command = [binary, "--data", data, "--device", device, "--val-size", "0", "--json-log", log, "--seed", "3"] + flags
    result = subprocess.run(command, capture_output=True, text=True)
    sys.stdout.write(f"== {name} on {device}: {' '.join(command[1:])}\n{result.stdout}")
    if result.returncode != 0:
        sys.stdout.write(result.stderr)
        raise SystemExit(f"sim_training: FAIL: {name} on {device} exited with {result.returncode}")
    with open(log) as f:
        return [json.loads(line) for line in f if '"epoch"' in line]


def main():
    binary, mnist, work = sys.argv[1:4]
    if find(mnist, "train-images-idx3-ubyte") is None:
        print(f"sim_training: skipped: no MNIST files in {mnist}")
        return 77
    failures = []

    def check(condition, message):
        print(("ok: " if condition else "FAIL: ") + message)
        if not condition:
            failures.append(message)

    mlp_data, cnn_data = os.path.join(work, "mlp-data"), os.path.join(work, "cnn-data")
    write_subset(mnist, mlp_data, 2048, 256)
    write_subset(mnist, cnn_data, 256, 64)
    mlp = ["--model", "mlp", "--hidden", "32", "--epochs", "2", "--batch-size", "128", "--workers", "1"]
    runs = [
        ("sgd-momentum", mlp + ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9"], True, 1e-4),
        ("adam", mlp + ["--optimizer", "adam", "--lr", "0.001"], True, 1e-4),
        ("autograd", mlp + ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--step", "autograd"], False,
         1e-4),
        # Mixed precision. bf16 on the GPU trains on the fused step and its graph (Note [fused step
        # in bf16]: cuBLASLt's 16-bit epilogues, the master gradients in f32), on the CPU through
        # autocast (the bf16 GEMM); f16 through autocast on both (cuBLAS's 16-bit GEMM, OpenBLAS on
        # widened copies). Each op rounds to 8 (bf16) or 11 (f16) significant bits, so where the f32
        # sums differ in order a rounding can fall the other way and the runs drift apart: measured
        # 6.2e-5 (bf16) and 4.2e-5 (f16) of the second epoch's mean loss; 1e-3 leaves a margin.
        ("bf16", mlp + ["--optimizer", "sgd", "--lr", "0.1", "--precision", "bf16"], True, 1e-3),
        ("f16", mlp + ["--optimizer", "sgd", "--lr", "0.1", "--precision", "f16"], False, 1e-3),
        # The CNN's first four steps (of 64 images), through cuDNN's model on the GPU and im2col + GEMM
        # on the CPU.
        ("cnn", ["--model", "cnn", "--channels", "8,16", "--hidden", "32", "--epochs", "1", "--workers", "1"], False,
         1e-4),
        # The same in bf16: cuDNN's model in f32 on widened copies on the GPU, the bf16 convolution
        # on the CPU (Note [bf16 convolution]); four steps of 64 images (measured 1.1e-7 apart).
        ("cnn-bf16", ["--model", "cnn", "--channels", "8,16", "--hidden", "32", "--epochs", "1", "--workers", "1",
                      "--precision", "bf16"], False, 1e-3),
        # A tiny ViT with its recipe (label smoothing, clipping, random crops, the per-step cosine):
        # the patch embedding through cuDNN's model, attention through the fused kernels (the
        # CPU's and the GPU's), LayerNorm and GELU from ops; two epochs of four steps of 64 images.
        ("vit", ["--model", "vit", "--patch", "7", "--width", "16", "--depth", "1", "--heads", "2", "--mlp-dim", "32",
                 "--epochs", "2", "--warmup-epochs", "1", "--workers", "1"], False, 1e-4),
    ]
    for name, flags, fused, rtol in runs:
        data = mlp_data if name in ("sgd-momentum", "adam", "autograd", "bf16", "f16") else cnn_data
        gpu = train(binary, data, work, name, "cuda", flags)
        cpu = train(binary, data, work, name, "cpu", flags)
        check(len(gpu) == len(cpu) and len(gpu) > 0, f"{name}: both devices logged {len(cpu)} epochs")
        for g, c in zip(gpu, cpu):
            a, b = g["train_loss"], c["train_loss"]
            check(abs(a - b) <= rtol * abs(b),
                  f"{name}: epoch {g['epoch']} loss {a:.7f} on the GPU, {b:.7f} on the CPU "
                  f"(relative difference {abs(a - b) / abs(b):.2e}, at most {rtol})")
        if fused:
            last = gpu[-1]
            check(last["graph_replays"] >= 10, f"{name}: {last['graph_replays']} replayed steps (at least 10)")
            check(last["graph_kernels"] > 0 and last["graph_kernels"] == last["step_launches"],
                  f"{name}: the captured graph holds {last['graph_kernels']} kernel nodes, the step issues "
                  f"{last['step_launches']} kernels and library calls")
    if failures:
        print(f"sim_training: {len(failures)} check(s) failed")
        return 1
    print("sim_training: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
