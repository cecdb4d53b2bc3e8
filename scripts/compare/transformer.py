#!/usr/bin/env python3
"""A transformer's two kernels on one GPU, ember against PyTorch, each timed with CUDA events: the
fused attention against F.scaled_dot_product_attention (PyTorch's flash or memory-efficient
kernel), and layer_norm against F.layer_norm, forward and forward + backward, in f32 and bf16, at
the ViT's shapes and at L = 1,024, d = 64.

  python3 scripts/compare/transformer.py --bench build/apps/bench_kernels [--repeat 20] [--json FILE]

ember's side is bench_kernels' families `attention` and `layer_norm` on cuda (CUDA events around
each call, the median of --repeat, each result checked before it is timed: a wrong one is refused);
PyTorch's side runs the same shapes and steps in this process. Prints a Markdown table with each
pair's ratio (PyTorch's time over ember's: above 1, ember is faster). PyTorch is a benchmark
dependency, never a CI one; with --dry-run only the command lines are printed."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# (family, bench_kernels' shape label) → the PyTorch shape that does the same work.
ATTENTION = {"B·H 32, L=S 1024, d 64": (32, 1024, 64), "B·H 256, L=S 50, d 16": (256, 50, 16)}
LAYER_NORM = {"32768 rows × 64": (32768, 64), "3200 rows × 64": (3200, 64)}


def ember_times(bench, repeat):
    """{(family, version, shape): µs} from bench_kernels on cuda; refused rows as None."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.json")
        subprocess.run([bench, "--device", "cuda", "--filter", "^(attention|layer_norm)$", "--repeat", str(repeat),
                        "--json", path], check=True, stdout=subprocess.DEVNULL)
        rows = json.load(open(path))["results"]
    return {(r["family"], r["version"], r["shape"]): (r["time_us"] if r.get("status") == "ok" else None) for r in rows}


def torch_time(torch, fn, repeat):
    """Median µs of fn() between two CUDA events, after three warm-up calls."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(times)


def torch_times(repeat):
    import torch
    import torch.nn.functional as F
    g = torch.Generator(device="cuda").manual_seed(5)
    out = {}

    def steps(forward, inputs, upstream):
        def fwd():
            forward(*inputs)

        def both():
            leaves = [t.detach().requires_grad_() for t in inputs]
            (forward(*leaves) * upstream).sum().backward()
        return (("forward", fwd), ("fwd+bwd", both))

    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        for label, (heads, length, dim) in ATTENTION.items():
            q, k, v, up = (torch.rand(1, heads, length, dim, generator=g, device="cuda").mul_(2).sub_(1).to(dtype)
                           for _ in range(4))
            for step, fn in steps(F.scaled_dot_product_attention, (q, k, v), up):
                out[("attention", name, step, label)] = torch_time(torch, fn, repeat)
        for label, (rows, width) in LAYER_NORM.items():
            x = torch.rand(rows, width, generator=g, device="cuda").mul_(4).sub_(2).to(dtype)
            up = torch.rand(rows, width, generator=g, device="cuda").mul_(2).sub_(1).to(dtype)
            weight = torch.rand(width, generator=g, device="cuda").add_(0.5).to(dtype)  # as the input, as in ember
            bias = torch.rand(width, generator=g, device="cuda").sub_(0.5).to(dtype)

            def norm(x_, w_, b_):
                return F.layer_norm(x_, (width,), w_, b_)
            for step, fn in steps(norm, (x, weight, bias), up):
                out[("layer_norm", name, step, label)] = torch_time(torch, fn, repeat)
    return out, torch.__version__, torch.cuda.get_device_name()


def ember_version(family, dtype, step):
    """bench_kernels' version name of a (family, dtype, step)."""
    if family == "attention":
        return ("fused bf16 " if dtype == "bf16" else "fused ") + step
    return f"{dtype} {step}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", required=True, help="bench_kernels of a CUDA build")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--json", help="write every pair's times here")
    p.add_argument("--dry-run", action="store_true", help="print what would run")
    args = p.parse_args()
    if args.dry_run:
        print(f"[dry run] {args.bench} --device cuda --filter ^(attention|layer_norm)$ --repeat {args.repeat}")
        print("[dry run] PyTorch F.scaled_dot_product_attention and F.layer_norm on cuda, CUDA events")
        return 0
    ember = ember_times(args.bench, args.repeat)
    torch, version, gpu = torch_times(args.repeat)
    print(f"{gpu}; PyTorch {version}; medians of {args.repeat} calls, CUDA events on both sides (µs)\n")
    print("| kernel | shape | dtype | step | ember (µs) | PyTorch (µs) | PyTorch / ember |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    rows, missing = [], 0
    for (family, dtype, step, label), theirs in torch.items():
        ours = ember.get((family, ember_version(family, dtype, step), label))
        rows.append({"family": family, "shape": label, "dtype": dtype, "step": step, "ember_us": ours,
                     "torch_us": theirs})
        if ours is None:
            missing += 1
        ratio = f"{theirs / ours:.2f}" if ours else "–"
        shown = f"{ours:.1f}" if ours else "refused or missing"
        print(f"| {family} | {label} | {dtype} | {step} | {shown} | {theirs:.1f} | {ratio} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu, "torch": version, "rows": rows}, f, indent=1)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
