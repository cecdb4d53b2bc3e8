"""Data-parallel training across hosts with no shared disk, on hosts made of Linux namespaces
(scripts/hosts.sh: network, mount and UTS namespaces joined by a bridge), over TCP only:

- each rank prints its host, namespace and address, and rank 1 cannot see a file in rank 0's
  private folder;
- 2 hosts × 1 rank, MLP, 2 epochs, each host reading its own copy of the data from its private
  folder: the parameters are bit-identical to 1 process with --micro-batches 2, after every epoch
  (the parameters' hashes) and at the end (rank 0's --save, read out of its host's private folder);
  every host holds the same checkpoint files, byte for byte, each having written its own;
- stopped after epoch 1 and host 1's copy removed, the run resumed on 2 hosts (rank 0 sends its
  checkpoint) ends bit-identical to the uninterrupted one, and so does the same checkpoint resumed
  as 1 host × 2 ranks and as 1 process with --micro-batches 2;
- a rank killed in a step's forward, inside the gradients' all-reduce or in the middle of its
  host's checkpoint save, or stopped (SIGSTOP): the other ends within the bound with its notice,
  mpirun names the lost rank, and a resume ends bit-identical to the uninterrupted run;
- host 1's link taken down: both ranks end at the collective timeout with their notices, and a
  resume ends bit-identical to the uninterrupted run;
- hosts whose data differ are refused at start-up, naming both hosts;
- 3 hosts × 1 rank (not a power of two) against 1 process with --micro-batches 3: MPI_SUM's order
  of three additions is Open MPI's choice, so the step losses are held to 1e-5 relative (the
  tolerance test_distributed gives a different batch split), and whether the bits agree is printed.

    test_hosts.py --train MNIST_TRAIN --data MNIST_DIR --work DIR --set SET
SET was made by `scripts/hosts.sh up SET 3 SUBNET` (CTest's fixture). Exits 77 (skipped) where
this machine cannot make namespaces (the reason is printed), or without mpirun, numpy or the
MNIST files."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

try:
    import numpy as np
except ImportError as error:
    print(f"test_hosts: skipped: {error}")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "interop"))
import safetensors_lite  # noqa: E402
from hosts_lib import HOSTS, MPI_ENV, PRIVATE, hosts, on_host, ranks, stage_data  # noqa: E402
# 1,920 training images: 15 steps of 128 (2 ranks × 64) or 10 of 192 (3 × 64) per epoch, nothing
# padded.
COMMON = ["--val-size", "8080", "--hidden", "128", "--workers", "1", "--step", "autograd", "--optimizer", "adam",
          "--lr", "0.002", "--log-step-losses"]
failures = 0


def check(ok, what):
    global failures
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    failures += 0 if ok else 1


def same_bits(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)) for k in a)


def who_is_where(set_name):
    """Each rank's host, namespace and address, and whether it sees host 0's marker file."""
    on_host(set_name, 0, f"touch {PRIVATE}/written-on-host-0")
    probe = ("echo rank $OMPI_COMM_WORLD_RANK host $(hostname) netns $(readlink /proc/self/ns/net) "
             "address $(ip -4 -o addr show eth0 | awk '{print $4}') "
             f"$(test -e {PRIVATE}/written-on-host-0 && echo sees || echo does-not-see) the file of host 0")
    result = hosts("mpirun", set_name, "-np", "2", "/bin/sh", "-c", probe, env={**os.environ, **MPI_ENV})
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank "))
    for line in lines:
        print("  " + line)
    check(result.returncode == 0 and len(lines) == 2,
          f"mpirun across the hosts starts one rank on each "
          f"(exit {result.returncode}{', ' + result.stderr[-300:] if result.returncode else ''})")
    if len(lines) == 2:
        fields = [line.split() for line in lines]
        check(fields[0][3] != fields[1][3] and fields[0][5] != fields[1][5] and fields[0][7] != fields[1][7],
              "the two ranks run on different hosts, namespaces and addresses")
        check(lines[0].endswith(" sees the file of host 0") and lines[1].endswith(" does-not-see the file of host 0"),
              "rank 1 cannot see what rank 0 wrote into its host's private folder")
    # And from outside: the folder exists on host 0 only, not on this machine's /tmp.
    check(not os.path.exists(f"{PRIVATE}/written-on-host-0"), "this machine cannot see it either")


def on_hosts_against_micro_batches(opts, set_name, count):
    """`count` hosts × 1 rank against 1 process with as many micro-batches; returns whether the
    parameters are bit-identical after every epoch and at the end, and the worst relative
    difference of the step losses."""
    name = f"{count}-hosts"
    args = [opts.train, "--distributed", "--data", f"{PRIVATE}/data", "--json-log", f"{PRIVATE}/{name}.json",
            "--save", f"{PRIVATE}/{name}.safetensors", "--batch-size", "64", "--epochs", "2"] + COMMON
    result = hosts("mpirun", set_name, "-np", str(count), *args, env={**os.environ, **MPI_ENV})
    if result.returncode != 0:
        print(result.stdout[-3000:], result.stderr[-3000:])
        check(False, f"{count} hosts × 1 rank train (exit {result.returncode})")
        return False, float("inf")
    wait = [float(m) for m in re.findall(r"communication wait: ([\d.]+)%", result.stdout)]
    print(f"  {count} hosts over TCP: communication wait per epoch {wait} %")
    model_path = os.path.join(opts.work, f"{name}.safetensors")
    with open(model_path, "wb") as out:
        copied = subprocess.run(["bash", HOSTS, "exec", set_name, "0", "cat", f"{PRIVATE}/{name}.safetensors"],
                                stdout=out, stderr=subprocess.PIPE, timeout=60)
    check(copied.returncode == 0, f"{name}: rank 0's --save is in its host's private folder")
    digests = [on_host(set_name, host, f"cd {PRIVATE} && sha256sum {name}.safetensors {name}.epoch-*").stdout
               for host in range(count)]
    check(all(d == digests[0] and d.count("\n") == 5 for d in digests),
          f"{name}: every host holds the same checkpoints, byte for byte (no shared folder: each wrote its own)")
    lines = [json.loads(line) for line in on_host(set_name, 0, f"cat {PRIVATE}/{name}.json").stdout.splitlines()]

    micro_log, micro_model = (os.path.join(opts.work, f"micro-{count}{ext}") for ext in (".json", ".safetensors"))
    single = subprocess.run([opts.train, "--data", opts.data, "--json-log", micro_log, "--save", micro_model,
                             "--batch-size", str(64 * count), "--micro-batches", str(count), "--epochs", "2"] + COMMON,
                            capture_output=True, text=True, timeout=300)
    if single.returncode != 0:
        print(single.stdout[-2000:], single.stderr[-2000:])
        raise SystemExit(f"test_hosts: 1 process with --micro-batches {count} failed (exit {single.returncode})")
    with open(micro_log) as f:
        micro = [json.loads(line) for line in f]
    hashes = [[line["params_hash"] for line in log if "params_hash" in line] for log in (lines, micro)]
    same = (len(hashes[0]) == 2 and hashes[0] == hashes[1] and copied.returncode == 0 and
            same_bits(safetensors_lite.load(model_path)[0], safetensors_lite.load(micro_model)[0]))
    losses = [np.array([x for line in log if "step_losses" in line for x in line["step_losses"]])
              for log in (lines, micro)]
    worst = float(np.max(np.abs(losses[0] - losses[1]) / np.abs(losses[1]))) if losses[0].shape == losses[1].shape \
        and losses[0].size else float("inf")
    return same, worst


def resume_where_only_rank0_holds_it(opts, set_name):
    """2 hosts stop after epoch 1; host 1's copy is removed; resumed on 2 hosts, the run ends
    bit-identical to the uninterrupted one (rank 0 sends host 1 its checkpoint)."""
    env = {**os.environ, **MPI_ENV}
    base = [opts.train, "--distributed", "--data", f"{PRIVATE}/data", "--batch-size", "64"] + COMMON
    first = hosts("mpirun", set_name, "-np", "2", *base, "--epochs", "1", "--save", f"{PRIVATE}/half.safetensors",
                  env=env)
    check(first.returncode == 0, f"2 hosts: 1 epoch saved (exit {first.returncode})")
    on_host(set_name, 1, f"rm -f {PRIVATE}/half*")
    check(on_host(set_name, 1, f"ls {PRIVATE}/half* 2>/dev/null").stdout == "", "host 1's copy removed")
    resumed = hosts("mpirun", set_name, "-np", "2", *base, "--epochs", "2", "--resume", f"{PRIVATE}/half.safetensors",
                    "--save", f"{PRIVATE}/resumed.safetensors", env=env)
    if resumed.returncode != 0:
        print(resumed.stdout[-2000:], resumed.stderr[-2000:])
    model_path = os.path.join(opts.work, "resumed.safetensors")
    with open(model_path, "wb") as out:
        subprocess.run(["bash", HOSTS, "exec", set_name, "0", "cat", f"{PRIVATE}/resumed.safetensors"], stdout=out,
                       timeout=60)
    straight = safetensors_lite.load(os.path.join(opts.work, "2-hosts.safetensors"))[0]
    check(resumed.returncode == 0 and same_bits(safetensors_lite.load(model_path)[0], straight),
          f"resumed on 2 hosts from a checkpoint only rank 0's host holds: bit-identical to the uninterrupted "
          f"run (exit {resumed.returncode})")

    # The same checkpoint resumed on another count of hosts: 1 host × 2 ranks (this machine, shared
    # memory) and 1 process with 2 micro-batches, each bit-identical to the uninterrupted 2-host run.
    here_dir = os.path.join(opts.work, "moved")
    os.makedirs(here_dir, exist_ok=True)
    packed = subprocess.run(["bash", HOSTS, "exec", set_name, "0", "/bin/sh", "-c", f"cd {PRIVATE} && tar -c half*"],
                            capture_output=True, timeout=60).stdout
    subprocess.run(["tar", "-C", here_dir, "-x"], input=packed, check=True)
    half = os.path.join(here_dir, "half.safetensors")
    local = [opts.train, "--data", opts.data, "--epochs", "2", "--resume", half] + COMMON
    for name, command in (("1 host × 2 ranks", ["mpirun", "-np", "2", "--bind-to", "none", *local, "--distributed",
                                                "--batch-size", "64"]),
                          ("1 process with --micro-batches 2",
                           [*local, "--batch-size", "128", "--micro-batches", "2"])):
        out = os.path.join(opts.work, name.replace(" ", "_") + ".safetensors")
        run = subprocess.run(command + ["--save", out], capture_output=True, text=True, timeout=300,
                             env={**os.environ, **MPI_ENV, "OMPI_MCA_btl_vader_single_copy_mechanism": "none"})
        if run.returncode != 0:
            print(run.stdout[-1500:], run.stderr[-1500:])
        check(run.returncode == 0 and same_bits(safetensors_lite.load(out)[0], straight),
              f"the 2-host checkpoint resumed as {name}: bit-identical to the uninterrupted 2-host run "
              f"(exit {run.returncode})")


def different_data_refused(opts, set_name):
    """Host 1's training labels replaced by the test set's (the same size and format, other
    content): the run is refused at start-up, naming both hosts."""
    on_host(set_name, 1, f"cd {PRIVATE}/data && for f in train-labels-idx1-ubyte*; do "
                         f"cp t10k-labels-idx1-ubyte${{f#train-labels-idx1-ubyte}} $f; done")
    result = hosts("mpirun", set_name, "-np", "2", opts.train, "--distributed", "--data", f"{PRIVATE}/data",
                   "--batch-size", "64", "--epochs", "1", *COMMON, env={**os.environ, **MPI_ENV})
    message = next((line for line in (result.stdout + result.stderr).splitlines() if "differ" in line), "")
    check(result.returncode == 2 and f"host {set_name}-h1" in message and f"host {set_name}-h0" in message
          and "data" in message,
          f"hosts whose data differ are refused, naming both (exit {result.returncode}): {message.strip()[:220]}")


def copy_out(set_name, index, path, to):
    with open(to, "wb") as out:
        return subprocess.run(["bash", HOSTS, "exec", set_name, str(index), "cat", path], stdout=out,
                              stderr=subprocess.PIPE, timeout=60).returncode == 0


def lost_ranks(opts, set_name):
    """A rank lost at a point its fault hook chooses (Note [fault points]): killed in a step's
    forward, inside the gradients' all-reduce, or in the middle of its host's checkpoint save (a
    torn write), or stopped without dying. The survivor ends within the bound, printing its notice
    (the newest complete checkpoint and the command that continues), mpirun names the lost rank,
    and a resume from the checkpoint ends bit-identical to the uninterrupted run."""
    env = {**os.environ, **MPI_ENV}
    timeout = 3
    args = [opts.train, "--distributed", "--data", f"{PRIVATE}/data", "--batch-size", "64", "--epochs", "3",
            "--collective-timeout", str(timeout)] + COMMON
    straight = hosts("mpirun", set_name, "-np", "2", *args, "--save", f"{PRIVATE}/lost-straight.safetensors", env=env)
    straight_model = os.path.join(opts.work, "lost-straight.safetensors")
    check(straight.returncode == 0 and copy_out(set_name, 0, f"{PRIVATE}/lost-straight.safetensors", straight_model),
          "2 hosts, 3 epochs uninterrupted")
    # Step 20 is in epoch 1 (15 steps an epoch); the 20th file operation of host 1's rank is the
    # write of its epoch-2 state file (13 a save: tests/apps/checkpoint_faults.sh counts them).
    cases = [("killed in forward", "EMBER_FAULT_POINT=forward:20", 10),
             ("killed in the all-reduce", "EMBER_FAULT_POINT=allreduce:20", 10),
             ("killed saving", "EMBER_FAULT_AT=20", 10),
             ("stopped (SIGSTOP)", "EMBER_FAULT_POINT=forward:20:stop", timeout + 10)]
    for name, fault, bound in cases:
        save = f"{PRIVATE}/lost-{len(name)}.safetensors"
        on_host(set_name, 0, f"rm -f {PRIVATE}/lost-{len(name)}*")
        on_host(set_name, 1, f"rm -f {PRIVATE}/lost-{len(name)}*")
        start = time.time()
        run = hosts("mpirun", set_name, "-np", "1", *args, "--save", save, ":", "-np", "1", "-x", fault, *args,
                    "--save", save, env=env)
        took = time.time() - start
        output = run.stdout + run.stderr
        # mpirun follows its SIGTERM with SIGKILL 1 s later (Open MPI's odls_base_sigkill_timeout), so
        # a notice printed at all was printed within 1 s, and without a collective.
        notice = next((line for line in output.splitlines() if line.startswith("rank 0 (host")), "")
        # A dead rank is named by mpirun; a stopped one by the watchdog of the rank that waited for it.
        lost = re.search(r"process rank 1 with PID \d+ on node \S+ exited on signal \d+", output)
        named = lost.group(0) if lost else "the watchdog" if f"for ranks 1 (hosts {set_name}-h1)" in notice else ""
        check(run.returncode != 0 and took <= bound and "to continue: mpirun" in notice and named != "",
              f"{name}: the run ends in {took:.1f} s (bound {bound} s), exit {run.returncode}; rank 0: "
              f"{notice[:150]}...; rank 1 named by {named or 'nobody'}")
        resumed = hosts("mpirun", set_name, "-np", "2", *args, "--resume", save, "--save", save, env=env)
        model = os.path.join(opts.work, f"lost-{len(name)}.safetensors")
        check(resumed.returncode == 0 and copy_out(set_name, 0, save, model) and
              same_bits(safetensors_lite.load(model)[0], safetensors_lite.load(straight_model)[0]),
              f"{name}: resumed from the newest complete checkpoint, the run ends bit-identical to the "
              f"uninterrupted one (exit {resumed.returncode})")


def partition(opts, set_name):
    """The link of host 1 taken down once an epoch is saved: both ranks end at the watchdog's
    deadline with their notices, and mpirun a few seconds later: its send to host 1's daemon gives
    up after the launcher's 3 TCP retries (scripts/hosts.sh), and it ends the job. The link back
    up, a resume from the newest complete checkpoint ends bit-identical to an uninterrupted run of
    as many epochs plus one."""
    env = {**os.environ, **MPI_ENV}
    timeout = 3
    args = [opts.train, "--distributed", "--data", f"{PRIVATE}/data", "--batch-size", "64", "--collective-timeout",
            str(timeout)] + COMMON
    for index in (0, 1):
        on_host(set_name, index, f"rm -f {PRIVATE}/cut*")
    job = subprocess.Popen(["bash", HOSTS, "mpirun", set_name, "-np", "2", *args, "--epochs", "400", "--save",
                            f"{PRIVATE}/cut.safetensors"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    deadline = time.time() + 120
    # Any epoch's checkpoint: a set keeps its newest few, so epoch 2's may be gone between two looks.
    while time.time() < deadline and on_host(set_name, 0, f"ls {PRIVATE}/cut.epoch-*.safetensors").returncode:
        time.sleep(0.05)
    link = f"ev-{set_name}-1"
    subprocess.run(["ip", "link", "set", link, "down"], check=True)
    cut = time.time()
    took = None  # until both ranks are gone
    while time.time() - cut < timeout + 30 and job.poll() is None:
        if took is None and not ranks(set_name):
            took = time.time() - cut
        time.sleep(0.05)
    ended = time.time() - cut if job.poll() is not None else None
    left = ranks(set_name)
    if took is None and not left:
        took = ended
    job.kill()
    output = job.communicate(timeout=30)[0]
    subprocess.run(["ip", "link", "set", link, "up"], check=True)
    for index in (0, 1):  # mpirun's daemons, which lost each other
        pids = subprocess.run(["ip", "netns", "pids", f"ember-{set_name}-h{index}"], capture_output=True,
                              text=True).stdout.split()
        subprocess.run(["kill", "-KILL", *pids], capture_output=True)
    notice = next((line for line in output.splitlines() if line.startswith("rank 0 (host") and "waited" in line), "")
    check(not left and took is not None and took <= timeout + 2 and "to continue: mpirun" in notice,
          f"host 1's link down: both ranks end {-1 if took is None else took:.1f} s later (the timeout is "
          f"{timeout} s); rank 0: "
          f"{notice[:160]}...")
    # mpirun's end: the ranks' timeout, then its first send to the lost daemon (when the ranks are
    # gone) and the launcher's 3 TCP retries, about 3 s; measured 6.5 to 10 s after the cut.
    check(ended is not None and ended <= timeout + 15,
          f"host 1's link down: mpirun, cut off from host 1's daemon, ends "
          f"{-1 if ended is None else ended:.1f} s later (bound "
          f"{timeout + 15} s)")
    newest = re.search(r"cut\.epoch-(\d+)\.safetensors", notice)
    if not newest:
        check(False, f"the notice names the newest complete checkpoint; mpirun's output ends: {output[-600:]}")
        return
    epochs = int(newest.group(1)) + 1
    resumed = hosts("mpirun", set_name, "-np", "2", *args, "--epochs", str(epochs), "--resume",
                    f"{PRIVATE}/cut.safetensors", "--save", f"{PRIVATE}/cut-resumed.safetensors", env=env)
    straight = hosts("mpirun", set_name, "-np", "2", *args, "--epochs", str(epochs), "--save",
                     f"{PRIVATE}/cut-straight.safetensors", env=env)
    models = [os.path.join(opts.work, f"cut-{name}.safetensors") for name in ("resumed", "straight")]
    copied = all(copy_out(set_name, 0, f"{PRIVATE}/cut-{name}.safetensors", to)
                 for name, to in zip(("resumed", "straight"), models))
    check(resumed.returncode == 0 and straight.returncode == 0 and copied and
          same_bits(safetensors_lite.load(models[0])[0], safetensors_lite.load(models[1])[0]),
          f"resumed from epoch {epochs - 1} after the partition, the run ends bit-identical to {epochs} epochs "
          f"uninterrupted")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--set", required=True, help="a set of 3 hosts made by scripts/hosts.sh up")
    opts = parser.parse_args()
    able = hosts("check")
    if able.returncode != 0:
        print(able.stdout.strip() or able.stderr.strip())
        return 77
    if not shutil.which("mpirun"):
        print("test_hosts: skipped: no mpirun (Debian: openmpi-bin)")
        return 77
    if not any(os.path.exists(os.path.join(opts.data, "train-images-idx3-ubyte" + z)) for z in ("", ".gz")):
        print(f"test_hosts: skipped: no MNIST files in {opts.data}")
        return 77
    if not os.path.exists(f"/run/ember-hosts/{opts.set}/addresses"):
        raise SystemExit(f"test_hosts: no host set '{opts.set}' (scripts/hosts.sh up {opts.set} 3 SUBNET first)")
    shutil.rmtree(opts.work, ignore_errors=True)
    os.makedirs(opts.work)
    stage_data(opts.set, (0, 1, 2), opts.data)
    who_is_where(opts.set)
    same, _ = on_hosts_against_micro_batches(opts, opts.set, 2)
    check(same, "2 hosts × 1 rank over TCP: parameters bit-identical to 1 process with --micro-batches 2, after "
                "every epoch and at the end")
    resume_where_only_rank0_holds_it(opts, opts.set)
    same, worst = on_hosts_against_micro_batches(opts, opts.set, 3)
    check(worst <= 1e-5, f"3 hosts × 1 rank: the 30 step losses within 1e-5 relative of 1 process with "
                         f"--micro-batches 3 (worst {worst:.2g}); parameters bit-identical: {same}")
    lost_ranks(opts, opts.set)
    partition(opts, opts.set)
    different_data_refused(opts, opts.set)
    print(f"test_hosts: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
