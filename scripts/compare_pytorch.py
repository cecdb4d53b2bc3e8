#!/usr/bin/env python3
"""Training speed of ember next to PyTorch, libtorch's C++ frontend and a bare OpenBLAS loop, in
one run on the same machine: the same MLPs, the same MNIST images, batch 128, SGD, shuffled each
epoch. Reports the median-epoch training images/s of each (evaluation excluded) and ember's ratios.

  scripts/compare_pytorch.py --device cpu [--build build] [--data DIR] [--threads 1,2]
                             [--models 32,128,512-256] [--epochs 6] [--rounds 3] [--report FILE]
  scripts/compare_pytorch.py --device cuda [--models 32,512-256] [--epochs 5] [--rounds 1] ...

On CUDA (see run_cuda): ember's fused step replayed from a CUDA graph (streaming batches from host
memory through pinned staging, and with the images preloaded on the device), the same step eager,
and the op-by-op autograd path, next
to PyTorch eager with the data preloaded on the device, PyTorch through the tutorials'
DataLoader(num_workers=2, pin_memory=True), and torch.compile(mode="reduce-overhead") where it
works; the first epoch of each is a warm-up and left out of the median; test accuracy is printed
beside the speed.

The references get their data preloaded as float tensors; ember reads the IDX files through its
DataLoader, as mnist_train does. Each configuration runs --rounds times, the frameworks taking
turns, and the median is over all epochs of all rounds. Run nothing else meanwhile: the numbers
of a shared, busy machine swing wildly. libtorch is measured where its headers are installed
(Debian's libtorch-dev); the script builds its small reference programs into build-compare/."""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_idx(folder, stem):
    for name in (stem, stem + ".gz"):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            raw = open(path, "rb").read()
            raw = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
            ndim = raw[3]
            dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
            return np.frombuffer(raw[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)
    sys.exit(f"compare_pytorch: no {stem} in {folder}")


def limit_torch_threads(threads):
    """torch.set_num_threads, and the same limit for the BLAS library PyTorch loaded: Debian's
    PyTorch calls OpenBLAS, whose own thread pool torch.set_num_threads does not reach (with
    set_num_threads(1) alone, a 1024³ SGEMM runs on both cores of this machine)."""
    import ctypes
    import torch
    torch.set_num_threads(threads)
    for path in sorted({line.split()[-1] for line in open("/proc/self/maps") if "blas" in line.lower()}):
        library = ctypes.CDLL(path)
        if hasattr(library, "openblas_set_num_threads"):
            library.openblas_set_num_threads(threads)


def thousands(rate):
    """Images/s in thousands to three significant digits: 366k, 24.1k, 6.23k."""
    return f"{rate / 1e6:.3g}M" if rate >= 1e6 else f"{rate / 1e3:.3g}k"


def build_references(out):
    """Compiles the bare-loop and libtorch reference programs; returns {name: path}."""
    os.makedirs(out, exist_ok=True)
    programs = {}
    bare = os.path.join(out, "bare_mlp")
    subprocess.run(["g++", "-O3", "-std=c++17", os.path.join(ROOT, "scripts/compare/bare_mlp.cpp"), "-o", bare,
                    "-I/usr/include/x86_64-linux-gnu/openblas-pthread",
                    "-L/usr/lib/x86_64-linux-gnu/openblas-pthread", "-lopenblas"], check=True)
    programs["bare loop"] = bare
    if os.path.exists("/usr/include/torch/csrc/api/include/torch/torch.h"):
        lib = os.path.join(out, "libtorch_mlp")
        if not os.path.exists(lib):
            print("compare_pytorch: building the libtorch reference (a minute) ...", flush=True)
            subprocess.run(["g++", "-O2", "-std=c++17", os.path.join(ROOT, "scripts/compare/libtorch_mlp.cpp"), "-o",
                            lib, "-I/usr/include/torch/csrc/api/include", "-ltorch", "-ltorch_cpu", "-lc10"],
                           check=True)
        programs["libtorch"] = lib
    else:
        print("compare_pytorch: libtorch-dev is not installed; the libtorch column stays empty")
    return programs


def run_program(path, data_dir, n, hidden, epochs, lr, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    out = subprocess.run([path, data_dir, str(n), hidden.replace("-", ","), str(epochs), "128", str(lr), str(threads)],
                         check=True, capture_output=True, text=True, env=env).stdout
    return [n / float(line.split()[2]) for line in out.splitlines() if line.startswith("epoch")]


def run_ember(train, data, hidden, epochs, lr, threads, work, device="cpu", extra=(), with_accuracy=False):
    log = os.path.join(work, "ember.jsonl")
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    subprocess.run([train, "--data", data, "--device", device, "--threads", str(threads), "--hidden",
                    hidden.replace("-", ","), "--epochs", str(epochs), "--val-size", "0", "--lr", str(lr),
                    "--batch-size", "128", "--json-log", log, *extra], check=True, stdout=subprocess.DEVNULL, env=env)
    lines = [json.loads(line) for line in open(log)]
    rates = [line["images_per_s"] for line in lines if "epoch" in line]
    if not with_accuracy:
        return rates
    return rates, next(line["test_acc"] for line in lines if "test_acc" in line)


def run_torch(x, y, hidden, epochs, lr, threads):
    import torch
    limit_torch_threads(threads)
    torch.manual_seed(0)
    widths = [784] + [int(h) for h in hidden.split("-")]
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(widths[-1], 10))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    n = x.shape[0]
    rates = []
    for _ in range(epochs):
        start = time.perf_counter()
        order = torch.randperm(n)
        for s in range(0, n, 128):
            idx = order[s:s + 128]
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
        rates.append(n / (time.perf_counter() - start))
    return rates


def torch_mlp(hidden):
    import torch
    widths = [784] + [int(h) for h in hidden.split("-")]
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(widths[-1], 10))


def run_torch_cuda(mode, x, y, xt, yt, hidden, epochs, lr):
    """PyTorch on the GPU, one of: preloaded (eager, data on the device), dataloader (the tutorials'
    pinned DataLoader with two workers), compile (torch.compile reduce-overhead, data preloaded).
    The loss is summed on the device and read once per epoch, as ember does. Returns (rates, acc)."""
    import torch
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch_mlp(hidden).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    forward = torch.compile(model, mode="reduce-overhead") if mode == "compile" else model
    xd, yd = x.to(dev), y.to(dev)
    n = x.shape[0]
    loader = None
    if mode == "dataloader":
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=128, shuffle=True,
                                             num_workers=2, pin_memory=True, persistent_workers=True)
    rates = []
    for _ in range(epochs):
        # CUDA events around the epoch, which ends on a read of the loss (a synchronization), as
        # ember's epoch timer does: the two measure the same span.
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        total = torch.zeros((), device=dev)
        if loader is not None:
            batches = ((bx.to(dev, non_blocking=True), by.to(dev, non_blocking=True)) for bx, by in loader)
        else:
            order = torch.randperm(n, device=dev)
            batches = ((xd[order[s:s + 128]], yd[order[s:s + 128]]) for s in range(0, n, 128))
        for bx, by in batches:
            loss = torch.nn.functional.cross_entropy(forward(bx), by)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach() * bx.shape[0]
        total.item()
        end.record()
        end.synchronize()
        rates.append(n / (start.elapsed_time(end) / 1e3))
    with torch.no_grad():
        acc = (model(xt.to(dev)).argmax(1) == yt.to(dev)).float().mean().item()
    return rates, acc


def partial(args, images, hidden, name, rates, acc):
    """One configuration's figures, appended to --partial as soon as they exist: a run cut short
    keeps what it measured. The first epoch is the warm-up (for torch.compile, the compilation):
    what it took beyond a median epoch is reported apart."""
    line = f"784-{hidden}-10 {name}: "
    if len(rates) > 1:
        median = statistics.median(rates[1:])
        warmup_s = images / rates[0] - images / median
        line += (f"{median / 1e3:.0f}k images/s (median of {len(rates) - 1} epochs after the first), "
                 f"first epoch {warmup_s:+.2f} s beyond a median one, test acc {acc:.4f}")
    else:
        line += f"{len(rates)} epoch(s): too few to report"
    print(line, flush=True)
    if args.partial:
        with open(args.partial, "a") as f:
            f.write(line + "\n")


def graph_ratio(row, other):
    """The ember graph step's images/s over `other`'s in one row of the table, "—" where either is missing."""
    return f"{row['ember graph'] / row[other]:.1f}" if other in row and "ember graph" in row else "—"


def run_cuda(args, train):
    import torch
    if not torch.cuda.is_available():
        sys.exit("compare_pytorch: --device cuda needs PyTorch with a usable CUDA device")
    images = read_idx(args.data, "train-images-idx3-ubyte")
    labels = read_idx(args.data, "train-labels-idx1-ubyte")
    n = len(images)
    x = torch.from_numpy(images.reshape(n, 784).astype(np.float32) / 255.0)
    y = torch.from_numpy(labels.astype(np.int64))
    test_images = read_idx(args.data, "t10k-images-idx3-ubyte")
    xt = torch.from_numpy(test_images.reshape(len(test_images), 784).astype(np.float32) / 255.0)
    yt = torch.from_numpy(read_idx(args.data, "t10k-labels-idx1-ubyte").astype(np.int64))
    ember_modes = {"ember graph": [], "ember graph preloaded": ["--preload"], "ember eager step": ["--cuda-graph", "0"],
                   "ember autograd": ["--step", "autograd"]}
    torch_modes = {"PyTorch preloaded": "preloaded", "PyTorch DataLoader": "dataloader",
                   "torch.compile": "compile"}
    torch_modes = {k: v for k, v in torch_modes.items() if v in args.torch_modes.split(",")}
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for hidden in args.models.split(","):
            rates = {k: [] for k in list(ember_modes) + list(torch_modes)}
            acc = {}
            for _ in range(args.rounds):
                for name, extra in ember_modes.items():
                    r, acc[name] = run_ember(train, args.data, hidden, args.epochs, args.lr, 1, work, "cuda", extra,
                                             with_accuracy=True)
                    rates[name] += r[1:]
                    partial(args, n, hidden, name, r, acc[name])
                for name, mode in torch_modes.items():
                    try:
                        r, acc[name] = run_torch_cuda(mode, x, y, xt, yt, hidden, args.epochs, args.lr)
                        rates[name] += r[1:]
                        partial(args, n, hidden, name, r, acc[name])
                    except Exception as e:  # torch.compile needs a working Triton toolchain
                        print(f"compare_pytorch: {name} failed ({type(e).__name__}: {str(e)[:200]})", flush=True)
            med = {k: statistics.median(v) for k, v in rates.items() if v}
            rows.append({"model": f"784-{hidden}-10", **med, "acc": acc})
            print(f"784-{hidden}-10: " + ", ".join(f"{k} {v / 1e3:.0f}k (acc {acc[k]:.4f})" for k, v in med.items()),
                  flush=True)
    columns = list(ember_modes) + list(torch_modes)
    lines = [f"| model | {' | '.join(c + ' images/s' for c in columns)} | graph / PyTorch preloaded | "
             "graph / PyTorch DataLoader | graph / torch.compile | streaming cost |",
             "| --- | " + " | ".join("---" for _ in columns) + " | --- | --- | --- | --- |"]
    for r in rows:
        cells = [f"{r[c] / 1e3:.0f}k ({r['acc'][c]:.4f})" if c in r else "—" for c in columns]
        # What streaming from host memory costs against the same step on preloaded data (goal ≤ 10%).
        cost = (f"{100 * (r['ember graph preloaded'] / r['ember graph'] - 1):.1f}%"
                if "ember graph" in r and "ember graph preloaded" in r else "—")
        lines.append(f"| {r['model']} | {' | '.join(cells)} | {graph_ratio(r, 'PyTorch preloaded')} | "
                     f"{graph_ratio(r, 'PyTorch DataLoader')} | {graph_ratio(r, 'torch.compile')} | {cost} |")
    print("\n".join(lines))
    if args.report:
        with open(args.report, "w") as f:
            f.write("images/s, median epoch after a warm-up epoch (test accuracy in brackets)\n\n"
                    + "\n".join(lines) + "\n")
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--data", default=os.environ.get("MNIST_DIR", os.path.join(ROOT, "data/mnist")))
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--models", help="hidden widths per model (default 32,128,512-256; on cuda 32,512-256)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rounds", type=int, help="default 3 on the CPU, 1 on cuda")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--report", help="write the table (markdown) to this file")
    parser.add_argument("--torch-modes", default="preloaded,dataloader,compile",
                        help="on cuda, PyTorch's configurations to run: preloaded (eager), dataloader, compile")
    parser.add_argument("--partial", help="append each configuration's line to this file as it is measured")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("compare_pytorch: needs PyTorch (Debian: python3-torch; run it with /usr/bin/python3)")
    train = os.path.join(args.build, "apps", "mnist_train")
    if not os.path.exists(train):
        sys.exit(f"compare_pytorch: build mnist_train first ({train} is missing)")
    args.models = args.models or ("32,512-256" if args.device == "cuda" else "32,128,512-256")
    args.rounds = args.rounds or (1 if args.device == "cuda" else 3)
    if args.device == "cuda":
        return run_cuda(args, train)
    images = read_idx(args.data, "train-images-idx3-ubyte")
    labels = read_idx(args.data, "train-labels-idx1-ubyte")
    n = len(images)
    x_np = images.reshape(n, 784).astype(np.float32) / 255.0
    y_np = labels.astype(np.int64)
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    programs = build_references(os.path.join(ROOT, "build-compare"))

    rows = []
    with tempfile.TemporaryDirectory() as work:
        x_np.tofile(os.path.join(work, "images.f32"))
        y_np.tofile(os.path.join(work, "labels.i64"))
        for threads in [int(t) for t in args.threads.split(",")]:
            for hidden in args.models.split(","):
                rates = {"ember": [], "PyTorch": []}
                rates.update({name: [] for name in programs})
                for _ in range(args.rounds):
                    rates["ember"] += run_ember(train, args.data, hidden, args.epochs, args.lr, threads, work)
                    rates["PyTorch"] += run_torch(x, y, hidden, args.epochs, args.lr, threads)
                    for name, path in programs.items():
                        rates[name] += run_program(path, work, n, hidden, args.epochs, args.lr, threads)
                med = {k: statistics.median(v) for k, v in rates.items() if v}
                row = {"model": f"784-{hidden}-10", "threads": threads, **med}
                rows.append(row)
                print(f"784-{hidden}-10, {threads} thread(s): " +
                      ", ".join(f"{k} {thousands(v)}" for k, v in med.items()) +
                      f"; ember/PyTorch {med['ember'] / med['PyTorch']:.2f}" +
                      f", ember/bare loop {med['ember'] / med['bare loop']:.3f}" +
                      (f", ember/libtorch {med['ember'] / med['libtorch']:.2f}" if "libtorch" in med else ""),
                      flush=True)

    columns = ["ember", "PyTorch"] + list(programs)
    lines = [f"| model | threads | {' | '.join(c + ' images/s' for c in columns)} | ember/PyTorch | ember/libtorch "
             "| ember/bare loop |",
             "| --- | --- | " + " | ".join("---" for _ in columns) + " | --- | --- | --- |"]
    for r in rows:
        cells = [thousands(r[c]) if c in r else "—" for c in columns]
        lib = f"{r['ember'] / r['libtorch']:.2f}" if "libtorch" in r else "—"
        lines.append(f"| {r['model']} | {r['threads']} | {' | '.join(cells)} | {r['ember'] / r['PyTorch']:.2f} | {lib} "
                     f"| {r['ember'] / r['bare loop']:.3f} |")
    print("\n".join(lines))
    if args.report:
        with open(args.report, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
