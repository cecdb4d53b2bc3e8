#!/usr/bin/env python3
"""Test accuracy of the same training in f32, bf16 and f16 (mnist_train --precision): each precision
over the same seeds and epochs, the mean test accuracy of each and its difference from f32's.

    scripts/compare/precision_accuracy.py --train build/apps/mnist_train --data data/mnist \
        [--model mlp|cnn] [--epochs 5] [--seeds 0,1,2] [--device cpu] [--precisions f32,bf16,f16] \
        [--jobs 1] [-- EXTRA mnist_train FLAGS]

Prints each run and a Markdown table with each mean's standard error over the seeds and twice the
standard error of each difference from f32's mean; exits 1 when a precision's mean is more than --limit points
(default 0.3) from f32's. --jobs runs that many trainings at once (each is a process of its own, so
the results do not depend on it)."""
import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(train, data, model, epochs, seed, device, precision, extra, log):
    subprocess.run([train, "--data", data, "--model", model, "--epochs", str(epochs), "--seed", str(seed), "--device",
                    device, "--precision", precision, "--json-log", log, *extra], check=True,
                   stdout=subprocess.DEVNULL)
    lines = [json.loads(line) for line in open(log)]
    skipped = max((line.get("skipped_steps", 0) for line in lines), default=0)
    return next(line["test_acc"] for line in lines if "test_acc" in line), skipped


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precisions", default="f32,bf16,f16")
    parser.add_argument("--limit", type=float, default=0.3, help="points of test accuracy")
    parser.add_argument("--jobs", type=int, default=1, help="trainings run at once")
    parser.add_argument("extra", nargs="*", help="more mnist_train flags, after --")
    opts = parser.parse_args()
    seeds = [int(s) for s in opts.seeds.split(",")]
    runs = [(precision, seed) for precision in opts.precisions.split(",") for seed in seeds]
    results = {precision: [None] * len(seeds) for precision, _ in runs}
    with tempfile.TemporaryDirectory() as work, concurrent.futures.ThreadPoolExecutor(opts.jobs) as pool:
        futures = {pool.submit(run, opts.train, opts.data, opts.model, opts.epochs, seed, opts.device, precision,
                               opts.extra, os.path.join(work, f"{precision}-{seed}.jsonl")): (precision, seed)
                   for precision, seed in runs}
        for future in concurrent.futures.as_completed(futures):
            precision, seed = futures[future]
            accuracy, skipped = future.result()
            results[precision][seeds.index(seed)] = accuracy
            note = f", {skipped} steps skipped by the loss scaler" if skipped else ""
            print(f"{opts.model} {precision} seed {seed}: test accuracy {accuracy:.4f}{note}", flush=True)
    base = statistics.mean(results["f32"])
    print(f"\n{opts.model}, {opts.epochs} epochs, {opts.device}, seeds {opts.seeds}"
          f"{' ' + ' '.join(opts.extra) if opts.extra else ''}\n")

    # The standard error of a mean over the seeds, and of the difference of two means (the two sets
    # of runs independent): sqrt(s_a²/n_a + s_b²/n_b). Needs two seeds or more.
    def squared_error(values):
        return statistics.variance(values) / len(values) if len(values) > 1 else float("nan")

    print("| precision | test accuracy per seed | mean ± standard error | − f32 (points) | "
          "2 standard errors of the difference (points) |")
    print("| --- | --- | --- | --- | --- |")
    worst = 0.0
    for precision, accuracies in results.items():
        mean = statistics.mean(accuracies)
        worst = max(worst, abs(mean - base) * 100)
        two_se = 200 * (squared_error(accuracies) + squared_error(results["f32"])) ** 0.5
        print(f"| {precision} | {', '.join(f'{a:.4f}' for a in accuracies)} | {mean:.4f} ± "
              f"{squared_error(accuracies) ** 0.5:.4f} | {(mean - base) * 100:+.2f} | "
              f"{'' if precision == 'f32' else f'{two_se:.2f}'} |")
    return 1 if worst > opts.limit else 0


if __name__ == "__main__":
    sys.exit(main())
