#!/usr/bin/env python3
"""Where the training thread of mnist_train spends its time: the share of its CPU samples in the
BLAS library (the GEMMs) and in everything else (elementwise kernels, the optimizer, autograd, the
loader's hand-off, reading the files), from `perf record` on the whole run — next to the same
shares of the bare OpenBLAS loop (scripts/compare/bare_mlp.cpp: the same GEMMs, SGD and ReLUs by
hand, nothing else) training the same MLP, run by run.

    scripts/compare/gemm_share.py --train build/apps/mnist_train --data ../shared/data/mnist \
        --hidden 512,256 [--runs 3] [--epochs 4]

1 thread; mnist_train with --val-size 0 and SGD lr 0.1 at batch 128, as the bare loop. Only the
main thread is counted: the data loader's workers run beside it on the other core. ember's run
includes each epoch's test evaluation (forward passes, GEMM-bound like the training) and the
decompression of the IDX files; the bare loop reads raw floats and evaluates nothing. Needs perf
(Debian: linux-perf); prints a Markdown row per run and the medians."""
import argparse
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


def profile(command, data, name):
    """BLAS share (percent) of the main thread of `command` (whose threads are called `name`)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    if subprocess.run(["perf", "record", "-q", "-F", "999", "-o", data, "--"] + command, env=env,
                      stdout=subprocess.DEVNULL).returncode != 0:
        sys.exit(f"gemm_share: {' '.join(command)} failed")
    # The main thread's id is the process id: the smallest of the program's threads.
    threads = subprocess.run(["perf", "report", "-i", data, "--sort", "pid", "--stdio"], check=True,
                             capture_output=True, text=True).stdout
    pid = min(int(tid) for tid in re.findall(r"(\d+):" + re.escape(name[:15]), threads))
    return sum(v for dso, v in shares(data, pid).items() if "blas" in dso)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--hidden", required=True, help="hidden widths, e.g. 512,256")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    opts = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    blas = {"ember": [], "bare loop": []}
    with tempfile.TemporaryDirectory() as work:
        images = read_idx(opts.data, "train-images-idx3-ubyte")
        n = len(images)
        (images.reshape(n, 784).astype(numpy.float32) / 255.0).tofile(os.path.join(work, "images.f32"))
        read_idx(opts.data, "train-labels-idx1-ubyte").astype(numpy.int64).tofile(os.path.join(work, "labels.i64"))
        bare = os.path.join(work, "bare_mlp")
        subprocess.run(["g++", "-O3", "-std=c++17", os.path.join(root, "scripts/compare/bare_mlp.cpp"), "-o", bare,
                        "-I/usr/include/x86_64-linux-gnu/openblas-pthread",
                        "-L/usr/lib/x86_64-linux-gnu/openblas-pthread", "-lopenblas"], check=True)
        data = os.path.join(work, "perf.data")
        print("| run | ember: GEMM | ember: the rest | bare loop: GEMM | bare loop: the rest |")
        print("| --- | --- | --- | --- | --- |")
        for run in range(opts.runs):
            blas["ember"].append(profile([opts.train, "--data", opts.data, "--threads", "1", "--val-size", "0",
                                          "--hidden", opts.hidden, "--epochs", str(opts.epochs), "--lr", "0.1"],
                                         data, "mnist_train"))
            blas["bare loop"].append(profile([bare, work, str(n), opts.hidden, str(opts.epochs), "128", "0.1", "1"],
                                             data, "bare_mlp"))
            e, b = blas["ember"][-1], blas["bare loop"][-1]
            print(f"| {run + 1} | {e:.1f}% | {100 - e:.1f}% | {b:.1f}% | {100 - b:.1f}% |", flush=True)
    e, b = statistics.median(blas["ember"]), statistics.median(blas["bare loop"])
    print(f"| median | {e:.1f}% | {100 - e:.1f}% | {b:.1f}% | {100 - b:.1f}% |")


if __name__ == "__main__":
    main()
