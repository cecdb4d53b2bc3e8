#!/usr/bin/env python3
"""The CPU's GEMMs in f32 and bf16, ember against PyTorch (oneDNN), one thread, interleaved.

  python3 scripts/compare/bf16_gemm.py --bench build/apps/bench_kernels --python /path/to/venv/bin/python \
      --rounds 5

Each round runs ember's bench_kernels (families gemm and gemm_bf16, the in-use versions) and then
PyTorch's torch.matmul on the same shapes — f32, and bf16 inputs as autocast gives them to a Linear
(x·Wᵀ with W [n, k]) — with one thread on both sides; prints the medians in GFLOP/s. PyTorch is a
benchmark dependency (a virtual environment with the latest wheel), never a CI one.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

TORCH = r"""
import json, sys, time, torch
torch.set_num_threads(1)
out = {}
for m, n, k, transposed, label in json.loads(sys.argv[1]):
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(m, k).to(dtype)
        b = torch.randn(n, k).to(dtype) if transposed else torch.randn(k, n).to(dtype)
        f = (lambda: a @ b.t()) if transposed else (lambda: a @ b)
        for _ in range(5):
            f()
        times = []
        for _ in range(25):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        times.sort()
        out[f"{label} {str(dtype).split('.')[-1]}"] = 2.0 * m * n * k / times[len(times) // 2] / 1e9
print(json.dumps(out))
"""

SHAPES = [(128, 32, 784, True, "128x32x784 x·W1ᵀ 784-32"), (128, 128, 784, True, "128x128x784 x·W1ᵀ 784-128"),
          (128, 512, 784, True, "128x512x784 x·W1ᵀ 784-512"), (1024, 1024, 1024, False, "1024x1024x1024 square")]


def ember_round(bench):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.json")
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        subprocess.run([bench, "--device", "cpu", "--filter", "^gemm", "--json", path], check=True,
                       stdout=subprocess.DEVNULL, env=env)
        rows = json.load(open(path))
        rows = rows["results"]
        out = {}
        for r in rows:
            if r.get("in_use") and r.get("family") in ("gemm", "gemm_bf16"):
                dtype = "bfloat16" if r["family"] == "gemm_bf16" else "float32"
                out[f"{r['shape']} {dtype}"] = r["gflop_per_s"]
        return out


def torch_round(python):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    text = subprocess.run([python, "-c", TORCH, json.dumps(SHAPES)], check=True, capture_output=True, text=True,
                          env=env).stdout
    return json.loads(text.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", required=True)
    p.add_argument("--python", required=True, help="a Python with the latest PyTorch")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    ember, torch = {}, {}
    for r in range(args.rounds):
        first, second = (ember_round, torch_round) if r % 2 == 0 else (torch_round, ember_round)
        for fn in (first, second):
            result = fn(args.bench if fn is ember_round else args.python)
            target = ember if fn is ember_round else torch
            for key, value in result.items():
                target.setdefault(key, []).append(value)
    version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    print(f"| shape | dtype | ember GFLOP/s | PyTorch {version} GFLOP/s | ember/PyTorch |")
    print("| --- | --- | --- | --- | --- |")
    for m, n, k, transposed, label in SHAPES:
        for dtype in ("float32", "bfloat16"):
            key = f"{label} {dtype}"
            if key not in ember or key not in torch:
                continue
            e, t = statistics.median(ember[key]), statistics.median(torch[key])
            print(f"| {label} | {dtype} | {e:.0f} | {t:.0f} | {e / t:.2f} |")


if __name__ == "__main__":
    main()
