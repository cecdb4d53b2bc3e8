#!/usr/bin/env python3
"""Mixed-precision training speed: ember in f32 and bf16 (mnist_train --precision; f16 too on CUDA)
next to PyTorch eager, torch.compile and bf16 autocast (eager and compiled), interleaved run by run,
on the same images — on the CPU with the same number of threads each (--threads, 1 by default), or
on a CUDA GPU.

    scripts/compare/mixed_precision.py --train build/apps/mnist_train --data data/mnist \
        --python VENV/bin/python [--device cpu|cuda] [--threads 1] [--models mlp,cnn] [--rounds 3] [--epochs 3]
        [--batch-size N] [--configs NAME,...]

Models: the MLP 784-512-256-10 (SGD 0.5, batch 128, [0, 1] inputs) and the CNN of PyTorch's MNIST
example (Adam 0.002 ×0.6 per epoch, batch 64, normalized inputs, dropout). Both sides hold the
training images in memory and gather each batch on the training thread (ember: --preload
--workers 0); each run trains --epochs epochs and its rate is the median training images/s of the
epochs after the first (warm-up: torch.compile compiles there). The PyTorch runs are processes of
their own (--python, e.g. a virtual environment with PyTorch from PyPI). Prints every run, then a
Markdown table of medians with each configuration's ratio to PyTorch's bf16 autocast and to ember's
f32. Run on a quiet machine: nothing else, no builds."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

EMBER = {  # configuration → mnist_train flags beyond the model's
    "ember f32": [],
    "ember f32 autograd": ["--step", "autograd"],
    "ember bf16": ["--precision", "bf16"],
}
TORCH = ["PyTorch eager", "PyTorch compile", "PyTorch bf16 autocast", "PyTorch compile + bf16 autocast"]
MODEL_FLAGS = {"mlp": ["--hidden", "512,256"], "cnn": ["--model", "cnn"]}


def run_ember(train, data, model, flags, epochs, log, device, threads, batch_size=None):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    where = ["--threads", str(threads), "--workers", "0"] if device == "cpu" else ["--device", device]
    if batch_size:
        where += ["--batch-size", str(batch_size)]
    subprocess.run([train, "--data", data, *MODEL_FLAGS[model], *flags, "--epochs", str(epochs), "--val-size", "0",
                    *where, "--preload", "--json-log", log], check=True, stdout=subprocess.DEVNULL, env=env)
    lines = [json.loads(line) for line in open(log)]
    rates = [line["images_per_s"] for line in lines if "images_per_s" in line]
    return statistics.median(rates[1:] if len(rates) > 1 else rates)


def ember_gemm_kernels(train):
    """ember_info's line naming OpenBLAS's kernel table (OPENBLAS_CORETYPE changes it; Note [OpenBLAS core])."""
    info = os.path.join(os.path.dirname(os.path.abspath(train)), "ember_info")
    if not os.path.exists(info):
        return "CPU GEMM kernels: unknown (build ember_info beside mnist_train to name them)"
    out = subprocess.run([info, "--device", "cpu"], capture_output=True, text=True).stdout
    return next((line for line in out.splitlines() if line.startswith("CPU GEMM kernels")), "CPU GEMM kernels: unknown")


def torch_worker(data, model_name, config, epochs, device, threads, batch_size=None):
    """One PyTorch run in this process; prints its median rate after the first epoch."""
    import torch
    from compare_pytorch import limit_torch_threads, read_idx
    if device == "cpu":
        limit_torch_threads(threads)
    torch.manual_seed(0)
    nn = torch.nn
    x = torch.from_numpy(read_idx(data, "train-images-idx3-ubyte").copy()).float().div_(255)
    y = torch.from_numpy(read_idx(data, "train-labels-idx1-ubyte").astype("int64"))
    if model_name == "mlp":
        x = x.reshape(-1, 784)
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
        batch, schedule = 128, None
    else:
        x = x.sub_(0.1307).div_(0.3081).unsqueeze(1)
        model = nn.Sequential(nn.Conv2d(1, 32, 3, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
                              nn.Linear(128, 10))
        batch = 64
    batch = batch_size or batch
    model.to(device)  # the optimizers are made after, over the parameters where they are
    x, y = x.to(device), y.to(device)
    if model_name == "mlp":
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=0.002)
        schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.6)
    forward = torch.compile(model) if "compile" in config else model
    autocast = "autocast" in config
    rates = []
    for _ in range(epochs):
        model.train()
        start = time.perf_counter()
        order = torch.randperm(x.shape[0], device=device)
        for s in range(0, x.shape[0], batch):
            idx = order[s:s + batch]
            with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
                loss = nn.functional.cross_entropy(forward(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        loss.item()  # waits for the epoch's work (on CUDA too)
        rates.append(x.shape[0] / (time.perf_counter() - start))
        if schedule:
            schedule.step()
    print(statistics.median(rates[1:] if len(rates) > 1 else rates))


def run_torch(python, data, model, config, epochs, device, threads, batch_size=None):
    batch = ["--batch-size", str(batch_size)] if batch_size else []
    out = subprocess.run([python, os.path.abspath(__file__), "--torch-worker", model, config, "--data", data,
                          "--epochs", str(epochs), "--device", device, "--threads", str(threads), *batch], check=True,
                         capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    return float(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train")
    parser.add_argument("--data", required=True)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads, the same on both sides")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, help="both sides' batch (default: the model's, 128 and 64)")
    parser.add_argument("--configs", help="comma-separated configurations to run (default: all; the table's "
                        "ratios need 'ember f32' and 'PyTorch bf16 autocast')")
    parser.add_argument("--torch-worker", nargs=2, metavar=("MODEL", "CONFIG"))
    opts = parser.parse_args()
    if opts.torch_worker:
        return torch_worker(opts.data, *opts.torch_worker, opts.epochs, opts.device, opts.threads, opts.batch_size)
    version = subprocess.run([opts.python, "-c", "import torch; print(torch.__version__)"], check=True,
                             capture_output=True, text=True).stdout.strip()
    print(f"ember's {ember_gemm_kernels(opts.train)}", flush=True)
    # On CUDA the MLP's bf16 runs the fused step; its autograd step is shown beside it, and f16.
    on_gpu = {"ember bf16 autograd": ["--precision", "bf16", "--step", "autograd"], "ember f16": ["--precision", "f16"]}
    ember = dict(EMBER, **(on_gpu if opts.device != "cpu" else {}))
    for model in opts.models.split(","):
        names = [*ember, *TORCH]
        if opts.configs:
            wanted = opts.configs.split(",")
            unknown = [name for name in wanted if name not in names]
            if unknown:
                parser.error(f"--configs: unknown {unknown}; the configurations are {names}")
            names = [name for name in names if name in wanted]
        results = {name: [] for name in names}
        with tempfile.TemporaryDirectory() as work:
            for round_ in range(opts.rounds):
                for name in results:
                    if name in ember:
                        rate = run_ember(opts.train, opts.data, model, ember[name], opts.epochs,
                                         os.path.join(work, "log.jsonl"), opts.device, opts.threads, opts.batch_size)
                    else:
                        rate = run_torch(opts.python, opts.data, model, name[len("PyTorch "):], opts.epochs,
                                         opts.device, opts.threads, opts.batch_size)
                    results[name].append(rate)
                    print(f"{model} round {round_ + 1} {name}: {rate:.0f} images/s", flush=True)
        median = {name: statistics.median(rates) for name, rates in results.items()}
        where = f"{opts.threads} thread{'s' if opts.threads > 1 else ''}" if opts.device == "cpu" else opts.device
        if opts.batch_size:
            where += f", batch {opts.batch_size}"
        print(f"\n{model}: PyTorch {version}, {where}, {opts.rounds} rounds of {opts.epochs} epochs (median of the "
              "epochs after the first)\n")
        print("| configuration | images/s (median) | range | × PyTorch bf16 autocast | × ember f32 |")
        print("| --- | --- | --- | --- | --- |")

        def ratio(name, to):
            return f"{median[name] / median[to]:.2f}" if to in median else "–"

        for name, rates in results.items():
            print(f"| {name} | {median[name]:.0f} | {min(rates):.0f}–{max(rates):.0f} | "
                  f"{ratio(name, 'PyTorch bf16 autocast')} | {ratio(name, 'ember f32')} |")
        print(flush=True)


if __name__ == "__main__":
    sys.exit(main())
