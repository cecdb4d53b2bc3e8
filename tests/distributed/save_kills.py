"""A rank killed at every file operation of a checkpoint save, on each of 2 hosts made of
namespaces (scripts/hosts.sh): the measurement behind docs/distributed.md's "killed in the middle
of its host's checkpoint save", run by hand (test_hosts.py checks one of these points in CI).

    save_kills.py --train MNIST_TRAIN --data MNIST_DIR --set SET

SET was made by `scripts/hosts.sh up SET 2 SUBNET`. For rank 0 and rank 1 in turn and for each of
the 13 file operations of epoch 2's save (EMBER_FAULT_AT, Note [file fault hook]), a 3-epoch run is
killed there; the other rank must print its notice, and a resume must end bit-identical to the
uninterrupted run. Exits 1 on any problem."""
import argparse
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "interop"))
import numpy as np  # noqa: E402
import safetensors_lite  # noqa: E402
from hosts_lib import MPI_ENV, PRIVATE, hosts, on_host, stage_data  # noqa: E402

FIRST_OP, OPS = 14, 13  # epoch 2's save: operations 14 to 26 of a rank (13 a save)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--set", required=True)
    opts = parser.parse_args()
    env = {**os.environ, **MPI_ENV}
    stage_data(opts.set, (0, 1), opts.data)
    args = [opts.train, "--distributed", "--data", f"{PRIVATE}/data", "--batch-size", "64", "--epochs", "3",
            "--collective-timeout", "5", "--val-size", "8080", "--hidden", "128", "--workers", "1", "--step",
            "autograd", "--optimizer", "adam", "--lr", "0.002"]

    def model(name):
        data = hosts("exec", opts.set, "0", "cat", f"{PRIVATE}/{name}.safetensors", text=False).stdout
        path = os.path.join(PRIVATE + "-out", name + ".safetensors")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return safetensors_lite.load(path)[0]

    hosts("mpirun", opts.set, "-np", "2", *args, "--save", f"{PRIVATE}/straight.safetensors", env=env)
    straight = model("straight")
    bad = 0
    for rank in (0, 1):
        for op in range(FIRST_OP, FIRST_OP + OPS):
            for index in (0, 1):
                on_host(opts.set, index, f"rm -f {PRIVATE}/f.* {PRIVATE}/.f.*")
            contexts = [["-np", "1", "-x", f"EMBER_FAULT_AT={op}", *args, "--save", f"{PRIVATE}/f.safetensors"],
                        ["-np", "1", *args, "--save", f"{PRIVATE}/f.safetensors"]]
            if rank == 1:
                contexts.reverse()
            start = time.time()
            run = hosts("mpirun", opts.set, *contexts[0], ":", *contexts[1], env=env)
            took = time.time() - start
            notice = any(line.startswith("rank ") and "to continue: mpirun" in line
                         for line in (run.stdout + run.stderr).splitlines())
            resumed = hosts("mpirun", opts.set, "-np", "2", *args, "--resume", f"{PRIVATE}/f.safetensors", "--save",
                            f"{PRIVATE}/f.safetensors", env=env)
            same = resumed.returncode == 0 and all(
                np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(model("f").values(),
                                                                                   straight.values()))
            bad += 0 if run.returncode != 0 and notice and same else 1
            print(f"rank {rank} killed at file operation {op}: the run ended in {took:.1f} s (exit {run.returncode}), "
                  f"the survivor's notice {'printed' if notice else 'MISSING'}; resumed: "
                  f"{'bit-identical' if same else 'DIFFERENT OR FAILED'}", flush=True)
    print(f"{bad} problem(s) in {2 * OPS} kills")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
