#!/usr/bin/env python3
"""The ViT's default recipe, ember against PyTorch in one run: the same architecture
(vit_reference.py: torchvision's VisionTransformer with a 1-channel conv_proj), recipe,
augmentation, split sizes and epochs, at the same thread count; prints each side's test accuracy
and wall time, and the CPU.

  python3 scripts/compare/vit.py --train build/apps/mnist_train --python /path/to/venv/bin/python \
      --dataset mnist --data ../shared/data/mnist --threads 2

The recipe (apps/common/recipes.cpp): AdamW lr 1e-3, weight decay 0.05, batch 64, a linear
warm-up from lr/100 over 3 epochs then a cosine to 0, per step; label smoothing 0.1; gradients
clipped to norm 1; RandomCrop(28, padding=2) and, for clothes, RandomHorizontalFlip; inputs
normalized by the dataset's mean and std; a sixth of the training images held out for validation.
Patch 4, width 64, depth 4, heads 4, MLP 128. The two sides draw different initial weights, splits,
orders and augmentations (different generators): the comparison is of the recipe's outcome.
PyTorch is a benchmark dependency (a virtual environment with the latest wheel), never a CI one.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

TORCH = r"""
import gzip, json, math, os, sys, time
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
from vit_reference import VisionTransformer
folder, dataset = sys.argv[2], sys.argv[3]
threads, epochs, warmup_epochs = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(threads)
torch.manual_seed(0)

def idx(name):
    for candidate in (name, name + ".gz"):
        path = os.path.join(folder, candidate)
        if os.path.exists(path):
            data = (gzip.open if path.endswith(".gz") else open)(path, "rb").read()
            dims = data[3]
            shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
            return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)
    raise SystemExit(f"{folder}: no {name}")

mean, std = (0.1307, 0.3081) if dataset == "mnist" else (0.2860, 0.3530)
train_x, train_y = idx("train-images-idx3-ubyte"), idx("train-labels-idx1-ubyte")
test_x, test_y = idx("t10k-images-idx3-ubyte"), idx("t10k-labels-idx1-ubyte")
order = torch.randperm(len(train_x))
held = len(train_x) // 6
train_idx = order[held:]
x_all = torch.from_numpy(train_x.copy()).float().div(255).sub(mean).div(std).unsqueeze(1)
y_all = torch.from_numpy(train_y.astype(np.int64))
xt = torch.from_numpy(test_x.copy()).float().div(255).sub(mean).div(std).unsqueeze(1)
yt = torch.from_numpy(test_y.astype(np.int64))
pad_value = (0 - mean) / std  # a zero pixel, normalized: torchvision pads the image before normalizing
flip = dataset != "mnist"

def augment(x):
    n = x.shape[0]
    padded = F.pad(x, (2, 2, 2, 2), value=pad_value)
    dy, dx = torch.randint(0, 5, (n,)), torch.randint(0, 5, (n,))
    rows = (dy[:, None] + torch.arange(28)[None, :])  # [n, 28]
    cols = (dx[:, None] + torch.arange(28)[None, :])
    out = torch.stack([padded[i, :, rows[i]][:, :, cols[i]] for i in range(n)])
    if flip:
        mirror = torch.rand(n) < 0.5
        out[mirror] = out[mirror].flip(-1)
    return out

model = VisionTransformer(image_size=28, patch_size=4, num_layers=4, num_heads=4, hidden_dim=64, mlp_dim=128)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
batch = 64
steps = math.ceil(len(train_idx) / batch)
warmup = warmup_epochs * steps
cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * steps - warmup)
schedule = cosine if warmup == 0 else torch.optim.lr_scheduler.SequentialLR(
    opt, [torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=warmup), cosine], milestones=[warmup])
t0 = time.perf_counter()
for epoch in range(epochs):
    model.train()
    perm = train_idx[torch.randperm(len(train_idx))]
    for s in range(steps):
        rows = perm[s * batch:(s + 1) * batch]
        loss = F.cross_entropy(model(augment(x_all[rows])), y_all[rows], label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
seconds = time.perf_counter() - t0
model.eval()
with torch.no_grad():
    correct = sum((model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum().item() for i in range(0, len(xt), 1000))
print(json.dumps({"test_acc": correct / len(xt), "seconds": seconds, "torch": torch.__version__}))
"""


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            info = {k.strip(): v for k, v in (line.split(":", 1) for line in f if ":" in line)}
        return f"{info['model name'].strip()} (family {info['cpu family'].strip()}, model {info['model'].strip()})"
    except (OSError, KeyError):
        return platform.processor()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", required=True, help="ember's mnist_train")
    parser.add_argument("--python", default=sys.executable, help="a Python with PyTorch")
    parser.add_argument("--dataset", default="mnist", choices=["mnist", "fashion-mnist"])
    parser.add_argument("--data", required=True, help="the dataset's folder of IDX files")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--epochs", type=int, help="the recipe's: 60 on digits, 30 on clothes")
    args = parser.parse_args()
    if args.epochs is None:
        args.epochs = 60 if args.dataset == "mnist" else 30
    warmup = min(3, args.epochs - 1)  # the recipe's 3 epochs, shortened for a short trial run
    here = os.path.dirname(os.path.abspath(__file__))
    print(f"CPU: {cpu_name()}; {args.threads} threads; {args.dataset}, {args.epochs} epochs")
    with tempfile.TemporaryDirectory() as work:
        log = os.path.join(work, "log.jsonl")
        t0 = time.perf_counter()
        subprocess.run([args.train, "--dataset", args.dataset, "--data", args.data, "--model", "vit", "--epochs",
                        str(args.epochs), "--warmup-epochs", str(warmup), "--threads", str(args.threads),
                        "--json-log", log],
                       check=True, stdout=subprocess.DEVNULL)
        ember_seconds = time.perf_counter() - t0
        with open(log) as f:
            ember = [json.loads(line) for line in f][-1]
    print(f"ember: test accuracy {ember['test_acc']:.4f}, {ember_seconds:.0f} s (the program, data and evaluation)")
    out = subprocess.run([args.python, "-c", TORCH, here, args.data, args.dataset, str(args.threads),
                          str(args.epochs), str(warmup)], check=True, capture_output=True, text=True)
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"PyTorch {theirs['torch']} eager: test accuracy {theirs['test_acc']:.4f}, "
          f"{theirs['seconds']:.0f} s (training only)")
    print(f"difference: {100 * (ember['test_acc'] - theirs['test_acc']):+.2f} points")


if __name__ == "__main__":
    main()
