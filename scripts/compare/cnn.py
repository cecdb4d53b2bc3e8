#!/usr/bin/env python3
"""The CNN of PyTorch's MNIST example trained by ember (mnist_train --model cnn) and by PyTorch on
the CPU, 1 thread each, interleaved run by run; medians over runs of the training images/s, and
each side's test accuracy after the same epochs with the same recipe (Adam 0.002 ×0.6 per epoch,
batch 64, normalized inputs, dropout 0.25/0.5).

    scripts/compare/cnn.py --train build/apps/mnist_train --data data/mnist \
        [--before OLD/mnist_train] [--runs 5] [--epochs 2]

--before adds a third program (an older mnist_train) to the same interleaving. Prints a Markdown
table and every run; run on a quiet machine."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from compare_pytorch import limit_torch_threads, read_idx  # noqa: E402


def run_ember(train, data, epochs, log):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    subprocess.run([train, "--data", data, "--model", "cnn", "--epochs", str(epochs), "--val-size", "0",
                    "--threads", "1", "--json-log", log], check=True, stdout=subprocess.DEVNULL, env=env)
    lines = [json.loads(line) for line in open(log)]
    rates = [line["images_per_s"] for line in lines if "images_per_s" in line]
    return statistics.median(rates), next(line["test_acc"] for line in lines if "test_acc" in line)


def run_torch(data, epochs, seed):
    import torch
    limit_torch_threads(1)
    torch.manual_seed(seed)
    nn = torch.nn

    def load(images, labels):
        x = torch.from_numpy(read_idx(data, images).copy()).float().div_(255).sub_(0.1307).div_(0.3081)
        return x.unsqueeze(1), torch.from_numpy(read_idx(data, labels).astype("int64"))

    x, y = load("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
    xt, yt = load("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    model = nn.Sequential(nn.Conv2d(1, 32, 3, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
                          nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.002)
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.6)
    rates = []
    for _ in range(epochs):
        model.train()
        start = time.perf_counter()
        order = torch.randperm(x.shape[0])
        for s in range(0, x.shape[0], 64):
            idx = order[s:s + 64]
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        loss.item()
        rates.append(x.shape[0] / (time.perf_counter() - start))
        schedule.step()
    model.eval()
    with torch.no_grad():
        correct = sum((model(xt[s:s + 256]).argmax(1) == yt[s:s + 256]).sum().item()
                      for s in range(0, xt.shape[0], 256))
    return statistics.median(rates), correct / xt.shape[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--before", help="an older mnist_train, run in the same interleaving")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2)
    opts = parser.parse_args()
    import torch
    sides = {"ember": [], "PyTorch " + torch.__version__: []}
    if opts.before:
        sides["ember before"] = []
    with tempfile.TemporaryDirectory() as work:
        for run in range(opts.runs):
            for name, results in sides.items():
                if name.startswith("PyTorch"):
                    result = run_torch(opts.data, opts.epochs, run)
                else:
                    program = opts.train if name == "ember" else opts.before
                    result = run_ember(program, opts.data, opts.epochs, os.path.join(work, "log.jsonl"))
                results.append(result)
                print(f"run {run + 1} {name}: {result[0]:.0f} images/s, test accuracy {result[1]:.4f}", flush=True)
    torch_name = next(n for n in sides if n.startswith("PyTorch"))
    torch_rate = statistics.median(r for r, _ in sides[torch_name])
    print(f"\n| {opts.epochs} epochs, 1 thread, {opts.runs} runs | images/s (median) | range | test accuracy "
          "(median) | × PyTorch |")
    print("| --- | --- | --- | --- | --- |")
    for name, results in sides.items():
        rates = [r for r, _ in results]
        rate = statistics.median(rates)
        accuracy = statistics.median(a for _, a in results)
        print(f"| {name} | {rate:.0f} | {min(rates):.0f}–{max(rates):.0f} | {accuracy:.4f} | "
              f"{rate / torch_rate:.2f} |")


if __name__ == "__main__":
    main()
