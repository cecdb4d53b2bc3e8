"""Data-parallel training across processes, checked with mpirun -np 2 on the CPU:

- 2 ranks with batch 64 leave parameters bit-identical to 1 process accumulating the same two
  micro-batches of 64 (--micro-batches 2), after every epoch, and follow 1 process with batch 128
  step by step (losses within 1e-5 relative): SGD with momentum and Adam, through autograd and
  through the fused step;
- a 2-rank checkpoint resumes bit-identically on 2 ranks, and within that tolerance on 1;
- a rank killed mid-epoch ends the run, non-zero, within 60 s; ranks started with different
  options are refused (exit 2, naming the option); --distributed without mpirun is refused.

    test_distributed.py --train MNIST_TRAIN --data MNIST_DIR --work DIR
Exits 77 (skipped) without mpirun, numpy or the MNIST files."""
import argparse
import json
import os
import shutil
import re
import signal
import subprocess
import sys
import time

try:
    import numpy as np
except ImportError as error:
    print(f"test_distributed: skipped: {error}")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import safetensors_lite  # noqa: E402

# Open MPI refuses root without these (CI runs as root); containers may lack the kernel's
# cross-memory attach, which the shared-memory transport otherwise uses for large messages.
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_rmaps_base_oversubscribe": "1"}
# 2,048 training images: 16 steps of 128 (2 ranks × 64) per epoch, nothing padded.
COMMON = ["--val-size", "7952", "--hidden", "128", "--workers", "1", "--log-step-losses"]
RECIPES = {"sgd-momentum": ["--optimizer", "sgd", "--lr", "0.5", "--momentum", "0.9"],
           "adam": ["--optimizer", "adam", "--lr", "0.002"]}
failures = 0


def check(ok, what):
    global failures
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    failures += 0 if ok else 1


def mpirun(ranks, args, timeout=300, **kwargs):
    command = ["mpirun", "-np", str(ranks), "--bind-to", "none"] + args
    return subprocess.run(command, env={**os.environ, **MPI_ENV}, capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def train(opts, work, name, ranks=1, extra=()):
    """Runs mnist_train (on `ranks` ranks with --distributed when above 1); returns the JSON log
    lines and the model's tensors."""
    log, model = os.path.join(work, name + ".json"), os.path.join(work, name + ".safetensors")
    args = [opts.train, "--data", opts.data, "--json-log", log, "--save", model] + COMMON + list(extra)
    result = mpirun(ranks, args + ["--distributed"]) if ranks > 1 else subprocess.run(
        args, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        print(result.stdout[-3000:], result.stderr[-3000:])
        raise SystemExit(f"test_distributed: {name} failed (exit {result.returncode})")
    if ranks > 1:  # Open MPI gives each rank a pseudo-terminal, even with mpirun's output in a pipe
        # (a frame is "\r  [====      ] 3/16"; text mode turns the \r into a line break)
        frames = re.findall(r"\[[= ]{30}\] \d+/\d+", result.stdout)
        check(not frames, f"{name}: no progress-bar frames in mpirun's redirected output ({len(frames)} found)")
    with open(log) as f:
        lines = [json.loads(line) for line in f]
    return lines, safetensors_lite.load(model)[0]


def same_bits(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)) for k in a)


def step_losses(lines):
    return np.array([x for line in lines if "step_losses" in line for x in line["step_losses"]])


def worst_relative(a, b):
    return float(np.max(np.abs(a - b) / np.abs(b))) if a.shape == b.shape and a.size else float("inf")


def equivalence(opts, work):
    for step in ("autograd", "fused"):
        for recipe, flags in RECIPES.items():
            extra = flags + ["--step", step, "--epochs", "2"]
            name = f"{step}-{recipe}"
            two, two_model = train(opts, work, name + "-2ranks", 2, extra + ["--batch-size", "64"])
            micro, micro_model = train(opts, work, name + "-micro", 1,
                                       extra + ["--batch-size", "128", "--micro-batches", "2"])
            big, _ = train(opts, work, name + "-batch128", 1, extra + ["--batch-size", "128"])
            check(same_bits(two_model, micro_model),
                  f"{name}: 2 ranks × 64 leave the parameters bit-identical to 1 process with 2 micro-batches of 64")
            hashes = [line["params_hash"] for line in two if "params_hash" in line]
            check(len(hashes) == 2 and hashes == [line["params_hash"] for line in micro if "params_hash" in line],
                  f"{name}: and after every epoch (parameter hashes {hashes}, identical on both ranks)")
            worst = worst_relative(step_losses(two), step_losses(big))
            check(worst <= 1e-5, f"{name}: 32 step losses within 1e-5 relative of 1 process with batch 128 "
                                 f"(worst {worst:.2g})")


def resume(opts, work):
    extra = RECIPES["adam"] + ["--step", "autograd"]
    straight, straight_model = train(opts, work, "straight", 2, extra + ["--batch-size", "64", "--epochs", "2"])
    train(opts, work, "half", 2, extra + ["--batch-size", "64", "--epochs", "1"])
    # Both resumes read the same checkpoint (a resume only reads the set it continues from).
    _, resumed_model = train(opts, work, "resumed-2", 2, extra + ["--batch-size", "64", "--epochs", "2", "--resume",
                                                                  os.path.join(work, "half.safetensors")])
    check(same_bits(resumed_model, straight_model),
          "a 2-rank checkpoint resumed on 2 ranks ends bit-identical to the uninterrupted 2-rank run")
    one, _ = train(opts, work, "resumed-1", 1, extra + ["--batch-size", "128", "--epochs", "2", "--resume",
                                                        os.path.join(work, "half.safetensors")])
    # Its log carries the resumed run's history (epoch 0, 2 ranks × 64) before its own epoch.
    worst = worst_relative(step_losses(one)[-16:], step_losses(straight)[-16:])
    check(worst <= 1e-5, f"resumed on 1 process with batch 128, its 16 step losses are within 1e-5 relative "
                         f"(worst {worst:.2g})")


def stop_and_resume(opts, work):
    """SIGUSR1 to mpirun, which forwards it to every rank as it is: the ranks agree on the step to
    stop at (Note [stop signals]), rank 0 saves there, every rank exits 138; resumed on 2 ranks, the
    run ends bit-identical to the uninterrupted one."""
    extra = RECIPES["adam"] + ["--step", "autograd", "--batch-size", "32", "--epochs", "3"]
    _, straight = train(opts, work, "stop-straight", 2, extra)
    save = os.path.join(work, "stopped.safetensors")
    args = ["mpirun", "-np", "2", "--bind-to", "none", opts.train, "--distributed", "--data", opts.data, "--save",
            save] + COMMON + extra
    job = subprocess.Popen(args, env={**os.environ, **MPI_ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    deadline = time.time() + 120
    while time.time() < deadline and job.poll() is None and not os.path.exists(save):
        time.sleep(0.01)
    time.sleep(0.03)  # into epoch 1, most likely mid-epoch (either way the resume must be exact)
    job.send_signal(signal.SIGUSR1)
    output = job.communicate(timeout=120)[0]
    stopped = re.search(r"stopped by SIGUSR1 at (epoch \d+(, step \d+)?)", output)
    check(job.returncode == 138 and stopped is not None,
          f"SIGUSR1 to mpirun: exit {job.returncode}, {stopped.group(0) if stopped else output[-500:]}")
    _, resumed = train(opts, work, "stopped", 2, extra + ["--resume", save])
    check(same_bits(resumed, straight), f"resumed from {stopped.group(1) if stopped else '?'} on 2 ranks, the run "
                                        "ends bit-identical to the uninterrupted one")


def failures_and_refusals(opts, work):
    # A rank killed mid-epoch: the run must end, non-zero, within 60 s (Open MPI's launcher ends
    # the job when a rank dies; a rank that throws ends it with MPI_Abort).
    args = ["mpirun", "-np", "2", "--bind-to", "none", opts.train, "--distributed", "--data", opts.data,
            "--hidden", "512", "--epochs", "50", "--step", "autograd", "--batch-size", "32", "--workers", "1"]
    job = subprocess.Popen(args, env={**os.environ, **MPI_ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    deadline = time.time() + 120
    ranks = []
    while time.time() < deadline and len(ranks) < 2 and job.poll() is None:
        found = subprocess.run(["pgrep", "-f", "mnist_train --distributed"], capture_output=True, text=True).stdout
        ranks = [int(p) for p in found.split() if int(p) != job.pid]
        time.sleep(0.2)
    time.sleep(3)  # into the first epoch
    check(len(ranks) == 2 and job.poll() is None, f"two ranks running before the kill (pids {ranks})")
    if ranks:
        os.kill(max(ranks), signal.SIGKILL)
    killed_at = time.time()
    try:
        output, _ = job.communicate(timeout=60)
        check(job.returncode != 0, f"a killed rank ends the run non-zero (exit {job.returncode}) after "
                                   f"{time.time() - killed_at:.1f} s")
    except subprocess.TimeoutExpired:
        job.kill()
        job.communicate()
        check(False, "a killed rank ends the run within 60 s (it was still running)")

    # Ranks started with different options: refused before training, naming the option.
    base = [opts.train, "--distributed", "--data", opts.data, "--epochs", "1"] + COMMON
    result = mpirun(1, base + ["--lr", "0.5", ":", "-np", "1"] + base + ["--lr", "0.1"], timeout=120)
    message = result.stdout + result.stderr
    check(result.returncode == 2 and "lr=0.1" in message and "rank 1" in message,
          f"ranks with different --lr are refused (exit {result.returncode}): "
          + next((line for line in message.splitlines() if "differ" in line), "no message"))
    # --distributed without mpirun.
    alone = subprocess.run(base, capture_output=True, text=True, timeout=60)
    check(alone.returncode == 2 and "mpirun" in alone.stderr,
          f"--distributed without mpirun is refused (exit {alone.returncode}): {alone.stderr.strip()[:160]}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--work", required=True)
    opts = parser.parse_args()
    if not shutil.which("mpirun"):
        print("test_distributed: skipped: no mpirun (Debian: openmpi-bin)")
        return 77
    if not any(os.path.exists(os.path.join(opts.data, "train-images-idx3-ubyte" + z)) for z in ("", ".gz")):
        print(f"test_distributed: skipped: no MNIST files in {opts.data}")
        return 77
    shutil.rmtree(opts.work, ignore_errors=True)
    os.makedirs(opts.work)
    equivalence(opts, opts.work)
    resume(opts, opts.work)
    stop_and_resume(opts, opts.work)
    failures_and_refusals(opts, opts.work)
    print("test_distributed:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
