#!/usr/bin/env python3
"""Training speed of two mnist_train binaries (two commits), interleaved run by run on one thread.

  python3 scripts/compare/builds.py --before OLD/apps/mnist_train --after build/apps/mnist_train \
      --data data/mnist --rounds 5

For each configuration (the MLP through the fused step and through autograd, the CNN), each round
runs the two binaries one after the other (alternating which goes first) and takes the training
images/s of the last epoch from --json-log; prints the medians and after/before. Also checks that
both trained the same parameters (params_hash), since a speed change with other results would
compare different work.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

CONFIGS = {
    "MLP 784-512-256-10, fused step": ["--hidden", "512,256", "--epochs", "2"],
    "MLP 784-512-256-10, autograd": ["--hidden", "512,256", "--epochs", "2", "--step", "autograd"],
    "CNN (PyTorch's example)": ["--model", "cnn", "--epochs", "1", "--val-size", "5000"],
}


def run(binary, args, data):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        subprocess.run([binary, "--data", data, "--threads", "1", "--workers", "1", "--json-log", log] + args,
                       check=True, stdout=subprocess.DEVNULL, env=env)
        epochs = [json.loads(line) for line in open(log) if '"epoch"' in line]
        return epochs[-1]["images_per_s"], epochs[-1]["params_hash"]


def runs(xs):
    """The rounds' images/s, comma-separated."""
    return ", ".join(f"{x:,.0f}" for x in xs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True)
    p.add_argument("--after", required=True)
    p.add_argument("--data", default="data/mnist")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    print(f"| configuration | before (images/s, median of {a.rounds}) | after | after/before | same parameters |")
    print("| --- | --- | --- | --- | --- |")
    for name, args in CONFIGS.items():
        speed = {"before": [], "after": []}
        hashes = {"before": set(), "after": set()}
        for r in range(a.rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for which in order:
                ips, h = run(getattr(a, which), args, a.data)
                speed[which].append(ips)
                hashes[which].add(h)
        b, n = statistics.median(speed["before"]), statistics.median(speed["after"])
        same = "yes" if hashes["before"] == hashes["after"] and len(hashes["before"]) == 1 else "NO"
        print(f"| {name} | {b:,.0f} ({runs(speed['before'])}) | {n:,.0f} ({runs(speed['after'])}) | "
              f"{n / b:.3f} | {same} |", flush=True)


if __name__ == "__main__":
    main()
