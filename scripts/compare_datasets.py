#!/usr/bin/env python3
"""Accuracy and speed on a whole dataset, ember next to PyTorch in one run on the same machine:
each model trained with its default recipe (mnist_train's; the same settings written out in
PyTorch) for a fixed number of epochs, then tested. Reports the test accuracy after the last epoch
and the training images/s of every epoch (evaluation excluded), the frameworks taking turns.

  scripts/compare_datasets.py [--dataset fashion-mnist] [--data DIR] [--models 32,256-128,cnn]
                              [--epochs 10] [--cnn-epochs 5] [--threads 1] [--rounds 1] [--report FILE]

Both read the same IDX files. PyTorch gets the images preloaded as one float tensor (normalized as
the recipe says) and draws its shuffled batches from it; ember reads them through its DataLoader,
as mnist_train does. Run nothing else meanwhile: a busy machine's timings swing wildly."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from compare_pytorch import limit_torch_threads, read_idx  # noqa: E402

# mnist_train's recipes (apps/mnist_train.cpp) and each dataset's mean and std (data/classification.cpp).
RECIPES = {"mlp": dict(optimizer="sgd", lr=0.5, decay=1.0, batch=128, normalize=False),
           "cnn": dict(optimizer="adam", lr=0.002, decay=0.6, batch=64, normalize=True)}
STATS = {"mnist": (0.1307, 0.3081), "fashion-mnist": (0.2860, 0.3530)}
DEFAULT_DIRS = {"mnist": os.path.join(ROOT, "data/mnist"), "fashion-mnist": "/usr/share/datasets/fashion-mnist"}


def torch_model(model, classes, side):
    import torch
    if model == "cnn":
        flat = 64 * ((side - 4) // 2) ** 2
        return torch.nn.Sequential(torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3),
                                   torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Dropout(0.25), torch.nn.Flatten(),
                                   torch.nn.Linear(flat, 128), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                                   torch.nn.Linear(128, classes))
    widths = [side * side] + [int(h) for h in model.split("-")]
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(widths[-1], classes))


def run_torch(model, data, epochs, threads):
    """Trains with the recipe; returns (images/s per epoch, test accuracy)."""
    import torch
    limit_torch_threads(threads)
    torch.manual_seed(0)
    (x, y, xt, yt), classes, side = data
    kind = "cnn" if model == "cnn" else "mlp"
    r = RECIPES[kind]
    net = torch_model(model, classes, side)
    if kind == "cnn":
        opt = torch.optim.Adam(net.parameters(), lr=r["lr"])
    else:
        opt = torch.optim.SGD(net.parameters(), lr=r["lr"])
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=r["decay"])
    shape = (-1, 1, side, side) if kind == "cnn" else (-1, side * side)
    x, xt = x.reshape(shape), xt.reshape(shape)
    n, rates = x.shape[0], []
    for _ in range(epochs):
        net.train()
        start = time.perf_counter()
        order = torch.randperm(n)
        for s in range(0, n, r["batch"]):
            idx = order[s:s + r["batch"]]
            loss = torch.nn.functional.cross_entropy(net(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        rates.append(n / (time.perf_counter() - start))
        sched.step()
    net.eval()
    with torch.no_grad():
        correct = sum(int((net(xt[s:s + 1000]).argmax(1) == yt[s:s + 1000]).sum()) for s in range(0, len(xt), 1000))
    return rates, correct / len(xt)


def run_ember(train, dataset, folder, model, epochs, threads, work):
    log = os.path.join(work, "ember.jsonl")
    flags = ["--model", "cnn"] if model == "cnn" else ["--hidden", model.replace("-", ",")]
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    subprocess.run([train, "--dataset", dataset, "--data", folder, "--device", "cpu", "--threads", str(threads),
                    *flags, "--epochs", str(epochs), "--val-size", "0", "--json-log", log], check=True,
                   stdout=subprocess.DEVNULL, env=env)
    lines = [json.loads(line) for line in open(log)]
    rates = [entry["images_per_s"] for entry in lines if "epoch" in entry]
    return rates, next(entry["test_acc"] for entry in lines if "test_acc" in entry)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", default="fashion-mnist", choices=sorted(STATS))
    parser.add_argument("--data")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--models", default="32,256-128,cnn")
    parser.add_argument("--epochs", type=int, default=10, help="epochs for the MLPs")
    parser.add_argument("--cnn-epochs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--report", help="append the table (markdown) to this file")
    args = parser.parse_args()
    import torch
    folder = args.data or DEFAULT_DIRS[args.dataset]
    train = os.path.join(args.build, "apps", "mnist_train")
    images = read_idx(folder, "train-images-idx3-ubyte")
    labels = read_idx(folder, "train-labels-idx1-ubyte").astype(np.int64)
    test_images = read_idx(folder, "t10k-images-idx3-ubyte")
    test_labels = read_idx(folder, "t10k-labels-idx1-ubyte").astype(np.int64)
    side, classes = images.shape[1], int(labels.max()) + 1
    mean, std = STATS[args.dataset]

    def tensors(normalize):
        scale = (lambda a: (a.astype(np.float32) / 255.0 - mean) / std) if normalize else \
            (lambda a: a.astype(np.float32) / 255.0)
        return (torch.from_numpy(scale(images)), torch.from_numpy(labels), torch.from_numpy(scale(test_images)),
                torch.from_numpy(test_labels))

    rows = []
    with tempfile.TemporaryDirectory() as work:
        for model in args.models.split(","):
            kind = "cnn" if model == "cnn" else "mlp"
            epochs = args.cnn_epochs if kind == "cnn" else args.epochs
            data = (tensors(RECIPES[kind]["normalize"]), classes, side)
            result = {"ember": ([], []), "PyTorch": ([], [])}
            for _ in range(args.rounds):
                rates, acc = run_ember(train, args.dataset, folder, model, epochs, args.threads, work)
                result["ember"][0].extend(rates), result["ember"][1].append(acc)
                rates, acc = run_torch(model, data, epochs, args.threads)
                result["PyTorch"][0].extend(rates), result["PyTorch"][1].append(acc)
            name = "CNN 32-64-128" if kind == "cnn" else f"MLP {side * side}-{model}-{classes}"
            row = {"model": name, "epochs": epochs}
            for fw, (rates, accs) in result.items():
                row[fw] = dict(rates=rates, median=statistics.median(rates), acc=accs)
            rows.append(row)
            print(f"{name}, {epochs} epochs: " + "; ".join(
                f"{fw} test accuracy {', '.join(f'{a:.4f}' for a in r['acc'])}, images/s per epoch "
                f"{', '.join(f'{v:.0f}' for v in r['rates'])} (median {r['median']:.0f})"
                for fw, r in ((k, row[k]) for k in result)), flush=True)
    lines = ["| model | epochs | ember test acc | PyTorch test acc | ember images/s (median) | "
             "PyTorch images/s (median) | ember/PyTorch |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        e, p = r["ember"], r["PyTorch"]
        lines.append(f"| {r['model']} | {r['epochs']} | {', '.join(f'{a:.4f}' for a in e['acc'])} | "
                     f"{', '.join(f'{a:.4f}' for a in p['acc'])} | {e['median']:.0f} | {p['median']:.0f} | "
                     f"{e['median'] / p['median']:.2f} |")
    print("\n".join(lines))
    if args.report:
        with open(args.report, "a") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
