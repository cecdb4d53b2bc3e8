"""Random kills from outside, on hosts made of namespaces (scripts/hosts.sh): the measurement
behind docs/distributed.md's "When a rank fails", run by hand (it is timing, not a test).

    random_kills.py --train MNIST_TRAIN --data MNIST_DIR --set SET [--trials 20] [--seed 1]

SET was made by `scripts/hosts.sh up SET 2 SUBNET`. Each trial starts 2 hosts × 1 rank training
the MLP with --save in each host's private folder, waits a random 0.5–4 s, kills a random rank
with SIGKILL, and measures the time until mpirun has exited and no rank is left. Then, on each
host, the newest complete checkpoint (the stable name's model file and its training state) must
parse, and its epoch is printed (host 1's may be one behind host 0's when the kill fell in its
save). Prints one line per trial and a summary; exits 1 if any checkpoint was not whole or a run
outlived 60 s."""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "interop"))
import safetensors_lite  # noqa: E402
from hosts_lib import HOSTS, MPI_ENV, PRIVATE, hosts, on_host, ranks, stage_data  # noqa: E402


def newest_complete(set_name, index):
    """The epoch of the host's newest complete checkpoint, read through its stable name and checked
    to parse with its state file; None when there is none, 'broken: ...' when it does not parse."""
    with tempfile.TemporaryDirectory() as tmp:
        packed = hosts("exec", set_name, str(index), "/bin/sh", "-c", f"cd {PRIVATE} && tar -c kill*",
                       text=False).stdout
        subprocess.run(["tar", "-C", tmp, "-x"], input=packed, capture_output=True)
        model = os.path.join(tmp, "kill.safetensors")
        if not os.path.exists(model):
            return None
        try:
            _, meta = safetensors_lite.load(model)
            epoch = meta["epoch"]
            safetensors_lite.load(os.path.join(tmp, f"kill.epoch-{epoch}.state.safetensors"))
            return int(epoch)
        except Exception as error:  # noqa: BLE001 (any failure to parse is the finding)
            return f"broken: {error}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--set", required=True)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    opts = parser.parse_args()
    rng = random.Random(opts.seed)
    stage_data(opts.set, (0, 1), opts.data)
    args = [opts.train, "--distributed", "--data", f"{PRIVATE}/data", "--val-size", "8080", "--hidden", "512",
            "--workers", "1", "--step", "autograd", "--optimizer", "adam", "--lr", "0.002", "--batch-size", "64",
            "--epochs", "400", "--save", f"{PRIVATE}/kill.safetensors"]
    bad, times = 0, []
    for trial in range(1, opts.trials + 1):
        for index in (0, 1):
            on_host(opts.set, index, f"rm -f {PRIVATE}/kill*")
        job = subprocess.Popen(["bash", HOSTS, "mpirun", opts.set, "-np", "2", *args], env={**os.environ, **MPI_ENV},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while len(ranks(opts.set)) < 2 and job.poll() is None:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.5, 4.0))
        victim = rng.choice((0, 1))
        pid = ranks(opts.set).get(victim)
        if pid is None:
            print(f"trial {trial}: rank {victim} was gone before the kill")
            bad += 1
            continue
        os.kill(pid, 9)
        killed = time.time()
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            job.kill()
            bad += 1
        while ranks(opts.set) and time.time() - killed < 60:
            time.sleep(0.02)
        took = time.time() - killed
        times.append(took)
        states = [newest_complete(opts.set, index) for index in (0, 1)]
        whole = all(isinstance(s, int) or s is None for s in states)
        bad += 0 if whole and took < 60 else 1
        print(f"trial {trial}: killed rank {victim}; the run ended {took:.2f} s later (mpirun exit {job.returncode}); "
              f"newest complete checkpoint: host 0 epoch {states[0]}, host 1 epoch {states[1]}"
              f"{'' if whole else '  <-- NOT WHOLE'}", flush=True)
    if times:
        times.sort()
        print(f"{len(times)} kills: time to end median {times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s; "
              f"{bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
