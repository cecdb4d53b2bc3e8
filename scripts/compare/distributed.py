#!/usr/bin/env python3
"""Images/s of 2 ranks × 1 thread (mpirun -np 2 mnist_train --distributed) against 1 process × 1
thread, interleaved run by run, medians over runs; the same global batch on both sides.

    scripts/compare/distributed.py --train build/apps/mnist_train --data data/mnist [--runs 5]

Each run's figure is the median of its epochs after the first (the first includes start-up:
loading, the first steps' allocations). Prints a Markdown table; run on a quiet machine."""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
# name, flags, global batch, extra flags
MODELS = [("MLP 784-128-10 (fused step)", ["--hidden", "128", "--val-size", "0", "--epochs", "4"], 128),
          ("MLP 784-128-10 (autograd)", ["--hidden", "128", "--val-size", "0", "--epochs", "4", "--step",
                                         "autograd"], 128),
          ("CNN 32/64 (autograd)", ["--model", "cnn", "--val-size", "7952", "--epochs", "3"], 64)]


def images_per_s(command, log, env=None):
    subprocess.run(command + ["--json-log", log], check=True, capture_output=True,
                   env={**os.environ, **(env or {})})
    with open(log) as f:
        epochs = [json.loads(line) for line in f if '"images_per_s"' in line]
    waits = [e.get("communication_wait_s", 0) / (e["epoch_s"]) for e in epochs[1:]]
    return statistics.median(e["images_per_s"] for e in epochs[1:]), statistics.median(waits) if waits else 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--runs", type=int, default=5)
    opts = parser.parse_args()
    base = [opts.train, "--data", opts.data, "--threads", "1", "--workers", "1"]
    print("| model | global batch | 1 process × 1 thread, images/s | 2 ranks × 1 thread, images/s | ratio | "
          "communication wait (2 ranks) | runs (1 process / 2 ranks) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as work:
        log = os.path.join(work, "log.json")
        for name, flags, batch in MODELS:
            one, two, waits = [], [], []
            for _ in range(opts.runs):  # interleaved: one run of each, in turn
                one.append(images_per_s(base + flags + ["--batch-size", str(batch)], log)[0])
                rate, wait = images_per_s(["mpirun", "-np", "2", "--bind-to", "none"] + base + flags +
                                          ["--distributed", "--batch-size", str(batch // 2)], log, MPI_ENV)
                two.append(rate)
                waits.append(wait)
            m1, m2 = statistics.median(one), statistics.median(two)
            print(f"| {name} | {batch} | {m1:.0f} | {m2:.0f} | {m2 / m1:.2f}× | {100 * statistics.median(waits):.1f}% "
                  f"| {', '.join(f'{x:.0f}' for x in one)} / {', '.join(f'{x:.0f}' for x in two)} |", flush=True)


if __name__ == "__main__":
    main()
