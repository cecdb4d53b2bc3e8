#!/usr/bin/env python3
"""Attention on the CPU, ember against PyTorch, interleaved round by round at equal thread counts.

  python3 scripts/compare/attention.py --bench build/apps/bench_kernels --python /path/to/venv/bin/python \
      --threads 1,2 --rounds 5

Each round runs ember's bench_kernels family `attention` (the fused kernels and the reference path,
forward and forward + backward, B·H 32, L = S 1024, d 64, in f32, and the fused kernels in bf16) and
then PyTorch's F.scaled_dot_product_attention on the same shape (its CPU flash kernel) and the same
steps, in f32 and in bf16, with the same number of threads on both sides; prints the medians in
milliseconds, and the CPU. PyTorch is a benchmark dependency (a virtual environment with the latest
wheel), never a CI one.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile

TORCH = r"""
import json, sys, time, torch
import torch.nn.functional as F
threads, heads, length, dim = (int(a) for a in sys.argv[1:5])
torch.set_num_threads(threads)
g = torch.Generator().manual_seed(5)
inputs = [torch.rand(heads, length, dim, generator=g) * 2 - 1 for _ in range(4)]
out = {}
for dtype, suffix in ((torch.float32, ""), (torch.bfloat16, " bf16")):
    q, k, v, up = (t.to(dtype) for t in inputs)
    def forward():
        F.scaled_dot_product_attention(q, k, v)
    def both():
        ql, kl, vl = (t.detach().requires_grad_() for t in (q, k, v))
        (F.scaled_dot_product_attention(ql, kl, vl) * up).sum().backward()
    for name, f in (("forward", forward), ("fwd+bwd", both)):
        f()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        out[name + suffix] = sorted(times)[len(times) // 2] * 1e3
print(json.dumps(out))
"""


def cpu_name():
    """The first processor's model name, family and model, as /proc/cpuinfo gives them."""
    fields = {}
    for line in open("/proc/cpuinfo"):
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return f"{fields.get('model name', platform.processor())} (family {fields.get('cpu family', '?')}, " \
           f"model {fields.get('model', '?')})"


def ember_round(bench, threads):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.json")
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        subprocess.run([bench, "--device", "cpu", "--filter", "^attention$", "--repeat", "5", "--threads",
                        str(threads), "--json", path], check=True, stdout=subprocess.DEVNULL, env=env)
        # bench_kernels' attention family has the ViT's shape too: only the one compared here.
        return {r["version"]: r["time_us"] / 1e3 for r in json.load(open(path))["results"]
                if r.get("status") == "ok" and "L=S 1024" in r.get("shape", "")}


def torch_round(python, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    text = subprocess.run([python, "-c", TORCH, str(threads), "32", "1024", "64"], check=True, capture_output=True,
                          text=True, env=env).stdout
    return {f"PyTorch {k}": v for k, v in json.loads(text.strip().splitlines()[-1]).items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", required=True)
    p.add_argument("--python", required=True, help="a Python with the latest PyTorch")
    p.add_argument("--threads", default="1")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    print(f"CPU: {cpu_name()}; PyTorch {version}; B·H 32, L = S 1024, d 64; median ms of {args.rounds} rounds")
    for threads in (int(t) for t in args.threads.split(",")):
        times = {}
        for r in range(args.rounds):
            order = (ember_round, torch_round) if r % 2 == 0 else (torch_round, ember_round)
            for fn in order:
                result = fn(args.bench if fn is ember_round else args.python, threads)
                for key, value in result.items():
                    times.setdefault(key, []).append(value)
        print(f"\n{threads} thread(s):\n| version | ms (median) | range |\n| --- | --- | --- |")
        for key in sorted(times):
            print(f"| {key} | {statistics.median(times[key]):.1f} | {min(times[key]):.1f}–{max(times[key]):.1f} |")


if __name__ == "__main__":
    main()
