#!/usr/bin/env python3
"""The ViT's training step on the CPU, ember against PyTorch's configurations, interleaved round by
round at equal thread counts; medians in milliseconds per step, and the CPU.

  python3 scripts/compare/vit_step.py --train build/apps/mnist_train --python /path/to/venv/bin/python \
      --data data/mnist --threads 1,2 --rounds 3

The step is the default recipe's (apps/common/recipes.cpp): the ViT of patch 4, width 64, depth 4,
4 heads, MLP 128 (vit_reference.py on PyTorch's side) on a batch of 64 digits; cross-entropy with
label smoothing 0.1; backward; gradients clipped to norm 1; AdamW.
- ember: one epoch of `mnist_train --model vit --val-size 0` (157 steps on the 10,000 digits) at
  f32 and at `--precision bf16`; a step's time is the epoch's training time less the time spent
  waiting for input, over the steps (the loader's crops run on its own thread meanwhile).
- PyTorch: 100 timed steps after 10 untimed ones (which include torch.compile's compilation), on
  batches cut once from the normalized images (no augmentation: that is left out of its time).
  Four configurations: eager, torch.compile (mode "default"), eager under
  torch.autocast("cpu", torch.bfloat16), and compile under that autocast. f32 rows compare with
  the first two, bf16 rows with the last two.
PyTorch is a benchmark dependency (a virtual environment with the latest wheel, and g++ and the
Python headers for torch.compile), never a CI one.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention import cpu_name  # noqa: E402

TORCH = r"""
import json, os, sys, time
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from vit_reference import VisionTransformer
from compare_pytorch import read_idx
folder, threads, config = sys.argv[2], int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(threads)
torch.manual_seed(0)
x_all = torch.from_numpy(read_idx(folder, "train-images-idx3-ubyte").copy()).float().div(255).sub(0.1307).div(0.3081)
x_all = x_all.unsqueeze(1)
y_all = torch.from_numpy(read_idx(folder, "train-labels-idx1-ubyte").astype(np.int64))
batches = [(x_all[i:i + 64], y_all[i:i + 64]) for i in range(0, 64 * 20, 64)]
model = VisionTransformer(image_size=28, patch_size=4, num_layers=4, num_heads=4, hidden_dim=64, mlp_dim=128)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
forward = torch.compile(model) if "compile" in config else model
bf16 = "bf16" in config

def step(x, y):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = F.cross_entropy(forward(x), y, label_smoothing=0.1)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()

for i in range(10):
    step(*batches[i % len(batches)])
t0 = time.perf_counter()
for i in range(100):
    step(*batches[i % len(batches)])
print(json.dumps({"ms": (time.perf_counter() - t0) * 10, "torch": torch.__version__}))
"""

TORCH_CONFIGS = {"f32": ["eager", "compile"], "bf16": ["eager+bf16", "compile+bf16"]}


def ember_round(train, data, threads, precision):
    with tempfile.TemporaryDirectory() as work:
        log = os.path.join(work, "log.jsonl")
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        subprocess.run([train, "--data", data, "--model", "vit", "--epochs", "1", "--warmup-epochs", "0",
                        "--val-size", "0", "--threads", str(threads), "--precision", precision, "--json-log", log],
                       check=True, stdout=subprocess.DEVNULL, env=env)
        epoch = [json.loads(line) for line in open(log) if "train_s" in line][-1]
    steps = -(-10000 // 64)
    return 1e3 * (epoch["train_s"] - epoch["input_wait_s"]) / steps


def torch_round(python, threads, config):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    out = subprocess.run([python, "-c", TORCH, here, DATA, str(threads), config], check=True, capture_output=True,
                         text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["ms"]


DATA = ""


def main():
    global DATA
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True, help="ember's mnist_train")
    p.add_argument("--python", required=True, help="a Python with the latest PyTorch")
    p.add_argument("--data", required=True, help="the MNIST folder (the 10,000-image training prefix)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--precisions", default="f32,bf16")
    args = p.parse_args()
    DATA = args.data
    version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    print(f"CPU: {cpu_name()}; PyTorch {version}; ViT step, batch 64; median ms of {args.rounds} rounds")
    precisions = args.precisions.split(",")
    for threads in (int(t) for t in args.threads.split(",")):
        times = {}
        for r in range(args.rounds):
            runs = [(f"ember {p}", lambda p=p: ember_round(args.train, args.data, threads, p)) for p in precisions]
            runs += [(f"PyTorch {c}", lambda c=c: torch_round(args.python, threads, c))
                     for p in precisions for c in TORCH_CONFIGS[p]]
            for name, run in (runs if r % 2 == 0 else runs[::-1]):
                times.setdefault(name, []).append(run())
        print(f"\n{threads} thread(s):\n| precision | version | ms per step (median) | range | "
              f"best PyTorch / ember |\n| --- | --- | --- | --- | --- |")
        for p in precisions:
            best = min(statistics.median(times[f"PyTorch {c}"]) for c in TORCH_CONFIGS[p])
            for name in [f"ember {p}"] + [f"PyTorch {c}" for c in TORCH_CONFIGS[p]]:
                median = statistics.median(times[name])
                ratio = f"{best / median:.2f}×" if name.startswith("ember") else ""
                print(f"| {p} | {name} | {median:.1f} | {min(times[name]):.1f}–{max(times[name]):.1f} | {ratio} |")


if __name__ == "__main__":
    main()
