"""The speed of 2 ranks on 2 hosts over TCP against 2 ranks on one machine over shared memory,
interleaved round by round: images/s and the share of the epoch spent waiting on the network, for
docs/results/distributed.md. A measurement, run by hand.

    hosts_speed.py --train MNIST_TRAIN --data MNIST_DIR --set SET [--rounds 5] [--hidden 128,1024]

SET was made by `scripts/hosts.sh up SET 2 SUBNET`. Each run trains the MLP (784-HIDDEN-10, Adam,
batch 64 per rank, autograd with its bucketed all-reduce) for 3 epochs on the 10,000-image
prefix less the validation sixth; the last epoch's line gives the figures. Prints the medians."""
import argparse
import os
import re
import statistics
import subprocess
import sys

from hosts_lib import HOSTS, MPI_ENV, PRIVATE, stage_data


def last_epoch(output):
    lines = [line for line in output.splitlines() if line.startswith("Epoch [")]
    if not lines:
        raise SystemExit("hosts_speed: no epoch line in:\n" + output[-2000:])
    images = float(re.search(r"images/s: (\d+)", lines[-1]).group(1))
    wait = float(re.search(r"communication wait: ([\d.]+)%", lines[-1]).group(1))
    return images, wait


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--set", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hidden", default="128,1024")
    opts = parser.parse_args()
    stage_data(opts.set, (0, 1), opts.data)
    # Shared memory without the kernel's cross-memory attach, which containers may lack.
    env = {**os.environ, **MPI_ENV, "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
    for hidden in opts.hidden.split(","):
        common = ["--distributed", "--hidden", hidden, "--workers", "1", "--step", "autograd", "--optimizer", "adam",
                  "--lr", "0.002", "--batch-size", "64", "--epochs", "3"]
        results = {"2 hosts, TCP": [], "1 machine, shared memory": []}
        for _ in range(opts.rounds):
            for name in results:
                if name.startswith("2 hosts"):
                    command = ["bash", HOSTS, "mpirun", opts.set, "-np", "2", opts.train, "--data",
                               f"{PRIVATE}/data", *common]
                else:
                    command = ["mpirun", "-np", "2", "--bind-to", "none", opts.train, "--data", opts.data, *common]
                run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
                results[name].append(last_epoch(run.stdout))
        print(f"\nMLP 784-{hidden}-10, 2 ranks × batch 64, medians of {opts.rounds} rounds:")
        print("| ranks | images/s | communication wait (% of the epoch) |\n| --- | --- | --- |")
        for name, runs in results.items():
            print(f"| {name} | {statistics.median(r[0] for r in runs):,.0f} | "
                  f"{statistics.median(r[1] for r in runs):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
