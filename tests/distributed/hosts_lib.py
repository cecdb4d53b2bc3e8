"""What the scripts on hosts made of namespaces share (scripts/hosts.sh): running a command in a
host, staging the MNIST files into each host's private folder, and finding the ranks."""
import os
import subprocess

HOSTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "hosts.sh")
# Open MPI refuses root without these (CI runs as root).
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
PRIVATE = "/tmp/ember-host"  # the same path on every host, a different folder on each (its own /tmp)


def hosts(*args, **kwargs):
    """scripts/hosts.sh with these arguments; the completed process (text unless text=False)."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    kwargs.setdefault("timeout", 300)
    return subprocess.run(["bash", HOSTS, *args], **kwargs)


def on_host(set_name, index, command, **kwargs):
    """A shell command inside host `index`; the completed process (text)."""
    return hosts("exec", set_name, str(index), "/bin/sh", "-c", command, **kwargs)


def stage_data(set_name, indices, data):
    """The MNIST files copied into each host's private folder (emptied first), through a pipe: a
    host cannot see a source under this machine's /tmp."""
    packed = subprocess.run(["tar", "-C", data, "-c", "."], capture_output=True, check=True).stdout
    for index in indices:
        result = hosts("exec", set_name, str(index), "/bin/sh", "-c",
                       f"rm -rf {PRIVATE} && mkdir -p {PRIVATE}/data && tar -C {PRIVATE}/data -x", input=packed,
                       text=False)
        if result.returncode != 0:
            raise SystemExit(f"staging the data on host {index} failed: {result.stderr.decode()[-500:]}")


def ranks(set_name, indices=(0, 1)):
    """{host index: pid} of the mnist_train processes alive in those hosts."""
    found = {}
    for index in indices:
        pids = subprocess.run(["ip", "netns", "pids", f"ember-{set_name}-h{index}"], capture_output=True,
                              text=True).stdout.split()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "mnist_train":
                        found[index] = int(pid)
            except OSError:
                pass
    return found
