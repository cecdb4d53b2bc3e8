#!/usr/bin/env python3
"""ember's mnist_train against PyTorch, step for step and in accuracy.

Parity: from the same initial weights (made by PyTorch, loaded by ember with --init), in the same
batch order (--no-shuffle), on the same images (pixel/255), the per-epoch training loss of the two
must agree to 1e-4 relative over 3 epochs and the final weights to 1e-3 relative — with plain SGD,
and with momentum 0.9 and weight decay 5e-4.

Accuracy: 784-32-10, batch 128, SGD lr 0.1, 10 epochs on the MNIST files given (no validation
split), each framework with its own initialization and shuffling: ember's test accuracy must be
within one percentage point of PyTorch's.

  parity_torch.py --train build/apps/mnist_train --data data/mnist [--report FILE]

Exits 77 (skipped) where PyTorch is missing."""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
except ImportError as error:
    print(f"parity_torch: skipped: PyTorch or numpy is not importable here ({error})")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "interop"))
import safetensors_lite  # noqa: E402


def read_idx(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)


def find(folder, stem):
    """The file `stem` or `stem`.gz in `folder`, or None."""
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    return None


MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def mlp(hidden=32):
    return torch.nn.Sequential(torch.nn.Linear(784, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


def torch_train(model, x, y, epochs, batch, lr, momentum, weight_decay, shuffle, seed):
    """PyTorch's training, with the per-epoch loss defined as ember's: Σ batch mean × batch size / N."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    n = x.shape[0]
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        total = 0.0
        for start in range(0, n, batch):
            idx = order[start:start + batch]
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        losses.append(total / n)
    return losses


def ember_train(binary, data, work, name, args):
    log = os.path.join(work, name + ".jsonl")
    save = os.path.join(work, name + ".safetensors")
    command = [binary, "--data", data, "--json-log", log, "--save", save, "--threads", "1", "--device", "cpu"] + args
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    lines = [json.loads(line) for line in open(log)]
    epochs = [line for line in lines if "epoch" in line]
    return epochs, lines[-1], safetensors_lite.load(save)[0]


def relative(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True, help="the mnist_train program")
    parser.add_argument("--data", required=True, help="MNIST folder")
    parser.add_argument("--report", help="also write the figures to this markdown file")
    parser.add_argument("--skip-accuracy", action="store_true")
    args = parser.parse_args()
    missing = [stem for stem in MNIST_FILES if find(args.data, stem) is None]
    if missing:
        print(f"parity_torch: skipped: {', '.join(missing)} not found in {args.data}")
        return 77
    torch.set_num_threads(1)
    images = read_idx(find(args.data, "train-images-idx3-ubyte"))
    labels = read_idx(find(args.data, "train-labels-idx1-ubyte"))
    x = torch.from_numpy(images.reshape(len(images), 784).astype(np.float32) / 255.0)
    y = torch.from_numpy(labels.astype(np.int64))
    report = ["| check | figure | limit | result |", "| --- | --- | --- | --- |"]
    failures = 0

    with tempfile.TemporaryDirectory() as work:
        for name, momentum, decay in (("sgd", 0.0, 0.0), ("sgd-momentum-wd", 0.9, 5e-4)):
            torch.manual_seed(1)
            model = mlp()
            init = os.path.join(work, "init.safetensors")
            safetensors_lite.save(init, {k: v.detach().numpy() for k, v in model.state_dict().items()})
            flags = ["--init", init, "--no-shuffle", "--val-size", "0", "--epochs", "3", "--batch-size", "128",
                     "--lr", "0.1", "--momentum", str(momentum), "--weight-decay", str(decay), "--hidden", "32"]
            epochs, _, weights = ember_train(args.train, args.data, work, name, flags)
            torch_losses = torch_train(model, x, y, 3, 128, 0.1, momentum, decay, shuffle=False, seed=0)
            worst_loss = max(abs(e["train_loss"] - t) / abs(t) for e, t in zip(epochs, torch_losses))
            worst_weight = max(relative(weights[k], v.detach().numpy()) for k, v in model.state_dict().items())
            ok_loss, ok_weight = worst_loss <= 1e-4, worst_weight <= 1e-3
            failures += (not ok_loss) + (not ok_weight)
            print(f"{name}: ember losses {[round(e['train_loss'], 6) for e in epochs]}, "
                  f"PyTorch {[round(t, 6) for t in torch_losses]}")
            print(f"{name}: worst relative loss difference {worst_loss:.2e} (limit 1e-4), "
                  f"worst relative weight difference {worst_weight:.2e} (limit 1e-3)")
            report.append(f"| {name}: per-epoch training loss, 3 epochs | {worst_loss:.2e} relative | 1e-4 | "
                          f"{'pass' if ok_loss else 'FAIL'} |")
            report.append(f"| {name}: final weights | {worst_weight:.2e} relative | 1e-3 | "
                          f"{'pass' if ok_weight else 'FAIL'} |")

        if not args.skip_accuracy:
            tests = read_idx(find(args.data, "t10k-images-idx3-ubyte"))
            test_labels = read_idx(find(args.data, "t10k-labels-idx1-ubyte"))
            tx = torch.from_numpy(tests.reshape(len(tests), 784).astype(np.float32) / 255.0)
            ty = torch.from_numpy(test_labels.astype(np.int64))
            start = time.time()
            _, final, _ = ember_train(args.train, args.data, work, "accuracy",
                                      ["--val-size", "0", "--epochs", "10", "--batch-size", "128", "--lr", "0.1",
                                       "--hidden", "32", "--seed", "0"])
            ember_seconds = time.time() - start
            torch.manual_seed(0)
            model = mlp()
            start = time.time()
            torch_train(model, x, y, 10, 128, 0.1, 0.0, 0.0, shuffle=True, seed=0)
            torch_seconds = time.time() - start
            with torch.no_grad():
                torch_acc = (model(tx).argmax(1) == ty).float().mean().item()
            gap = abs(final["test_acc"] - torch_acc) * 100
            ok = gap <= 1.0
            failures += not ok
            print(f"accuracy: ember {final['test_acc']:.4f} ({ember_seconds:.1f} s), PyTorch {torch_acc:.4f} "
                  f"({torch_seconds:.1f} s): {gap:.2f} percentage points apart (limit 1)")
            report.append(f"| test accuracy after 10 epochs: ember {final['test_acc']:.4f}, PyTorch {torch_acc:.4f} | "
                          f"{gap:.2f} points | 1 point | {'pass' if ok else 'FAIL'} |")

    if args.report:
        with open(args.report, "w") as f:
            f.write("\n".join(report) + "\n")
    print("parity_torch:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
