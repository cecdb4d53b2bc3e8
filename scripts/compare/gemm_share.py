#!/usr/bin/env python3
"""The non-GEMM share of mnist_train's training steps, next to the bare OpenBLAS loop's
(scripts/compare/bare_mlp.cpp: the same GEMMs, SGD and ReLUs by hand, nothing else) training the
same MLP, run by run.

    scripts/compare/gemm_share.py --train build/apps/mnist_train --data data/mnist \
        --hidden 512,256 [--runs 5] [--epochs 4] [--perf]

Per step: both programs time their own GEMM calls on the training thread (ember::cpu_gemm_seconds,
in mnist_train's JSON log as gemm_s next to train_s; the bare loop prints its own); the share
outside them is 1 − GEMM seconds / training seconds of each epoch after the first (the first pays
for page faults and warm-up), its median over epochs, then over runs. That counts everything a
step does besides its GEMMs: the elementwise kernels, the optimizer, the loader's hand-off and
the wait for a batch. Evaluation, startup and reading the files are outside the training span.

--perf adds the whole run's view: the share of the training thread's perf samples outside the
BLAS library, startup, decompression and evaluation included (needs perf; Debian: linux-perf).
1 thread; mnist_train with --val-size 0 and SGD lr 0.1 at batch 128, as the bare loop."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from compare_pytorch import read_idx  # noqa: E402


def shares(perf_data, tid):
    """{dso: percent} of thread `tid`'s samples."""
    report = subprocess.run(["perf", "report", "-i", perf_data, "--tid", str(tid), "--sort", "dso", "--stdio",
                             "--percentage", "relative", "--no-children"], check=True, capture_output=True,
                            text=True).stdout
    result = {}
    for line in report.splitlines():
        match = re.match(r"\s*([0-9.]+)%\s+(\S+)", line)
        if match:
            result[match.group(2)] = float(match.group(1))
    return result


def run(command, perf_data, name):
    """Runs `command` (whose threads are called `name`), under perf when perf_data is given; returns
    its stdout and, with perf, the BLAS share (percent) of its main thread's samples."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    prefix = ["perf", "record", "-q", "-F", "999", "-o", perf_data, "--"] if perf_data else []
    done = subprocess.run(prefix + command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"gemm_share: {' '.join(command)} failed:\n{done.stderr}")
    if not perf_data:
        return done.stdout, None
    # The main thread's id is the process id: the smallest of the program's threads.
    threads = subprocess.run(["perf", "report", "-i", perf_data, "--sort", "pid", "--stdio"], check=True,
                             capture_output=True, text=True).stdout
    pid = min(int(tid) for tid in re.findall(r"(\d+):" + re.escape(name[:15]), threads))
    return done.stdout, sum(v for dso, v in shares(perf_data, pid).items() if "blas" in dso)


def step_share(epochs):
    """Median over epochs after the first of the percent of training time outside GEMMs, from
    (training seconds, GEMM seconds) pairs."""
    return statistics.median(100 * (1 - gemm / train) for train, gemm in epochs[1:])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--hidden", required=True, help="hidden widths, e.g. 512,256")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--perf", action="store_true", help="also the whole run's perf samples outside BLAS")
    opts = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    step = {"ember": [], "bare loop": []}
    whole = {"ember": [], "bare loop": []}
    with tempfile.TemporaryDirectory() as work:
        images = read_idx(opts.data, "train-images-idx3-ubyte")
        n = len(images)
        (images.reshape(n, 784).astype(numpy.float32) / 255.0).tofile(os.path.join(work, "images.f32"))
        read_idx(opts.data, "train-labels-idx1-ubyte").astype(numpy.int64).tofile(os.path.join(work, "labels.i64"))
        bare = os.path.join(work, "bare_mlp")
        subprocess.run(["g++", "-O3", "-std=c++17", os.path.join(root, "scripts/compare/bare_mlp.cpp"), "-o", bare,
                        "-I/usr/include/x86_64-linux-gnu/openblas-pthread",
                        "-L/usr/lib/x86_64-linux-gnu/openblas-pthread", "-lopenblas"], check=True)
        data = os.path.join(work, "perf.data") if opts.perf else None
        log = os.path.join(work, "log.jsonl")
        header = "| run | ember: per step | bare loop: per step |" + (
            " ember: whole run | bare loop: whole run |" if opts.perf else "")
        print("Percent of the time outside GEMMs:\n")
        print(header)
        print("|" + " --- |" * (header.count("|") - 1))
        for r in range(opts.runs):
            _, blas = run([opts.train, "--data", opts.data, "--threads", "1", "--val-size", "0", "--hidden",
                           opts.hidden, "--epochs", str(opts.epochs), "--lr", "0.1", "--json-log", log], data,
                          "mnist_train")
            with open(log) as f:
                epochs = [json.loads(line) for line in f]
            step["ember"].append(step_share([(e["train_s"], e["gemm_s"]) for e in epochs if "gemm_s" in e]))
            whole["ember"].append(blas)
            out, blas = run([bare, work, str(n), opts.hidden, str(opts.epochs), "128", "0.1", "1"], data, "bare_mlp")
            fields = [line.split() for line in out.splitlines() if line.startswith("epoch")]
            step["bare loop"].append(step_share([(float(f[2]), float(f[4])) for f in fields]))
            whole["bare loop"].append(blas)
            print(row(str(r + 1), step, whole, opts.perf, lambda values: values[-1]), flush=True)
    print(row("median", step, whole, opts.perf, statistics.median))


def row(name, step, whole, perf, pick):
    cells = [f"{pick(step['ember']):.1f}%", f"{pick(step['bare loop']):.1f}%"]
    if perf:
        cells += [f"{100 - pick(whole['ember']):.1f}%", f"{100 - pick(whole['bare loop']):.1f}%"]
    return f"| {name} | " + " | ".join(cells) + " |"


if __name__ == "__main__":
    main()
