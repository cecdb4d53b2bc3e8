"""bench_kernels on tiny sizes on the CPU: the JSON report has its structure, every kernel family
is covered with a timed, checked result, and a deliberately wrong kernel version is refused, not
timed.   check_bench_kernels.py BENCH_KERNELS WORK_DIR"""
import json
import os
import subprocess
import sys

FAMILIES = {
    "relu_forward", "exp", "tanh", "affine", "binary_add", "binary_broadcast_add", "expand", "relu_backward",
    "tanh_backward", "leaky_relu_forward", "leaky_relu_backward", "pow_scalar", "copy_2d", "fill", "cast_f32_i32",
    "count_equal", "normalize_u8", "softmax_forward", "softmax_backward", "cross_entropy_forward",
    "cross_entropy_backward", "cross_entropy_fused", "max_last_dim", "sum_rows", "sum_dim0", "sum_all",
    "bias_relu_forward", "bias_relu_backward", "transpose", "sgd_momentum_step", "adamw_step", "gemm",
    "autograd_overhead", "parallel_split", "attention", "attention_memory", "layer_norm",
}


def main():
    tool, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    out = os.path.join(work, "bench.json")
    run = subprocess.run([tool, "--device", "cpu", "--sizes", "1000,4096", "--repeat", "3", "--include-broken",
                          "--json", out], capture_output=True, text=True)
    print(run.stdout[-3000:])
    problems = []
    if run.returncode != 0:
        problems.append(f"exit code {run.returncode}: {run.stderr}")
    report = json.load(open(out))
    for key in ("ember_version", "repeat", "ceilings", "results"):
        if key not in report:
            problems.append(f"missing key {key}")
    ceilings = [c for c in report["ceilings"] if c["device"] == "cpu"]
    if not ceilings or ceilings[0]["copy_gb_per_s"] <= 0 or ceilings[0]["gemm_gflop_per_s"] <= 0:
        problems.append("no positive CPU ceilings")
    seen = set()
    broken = [r for r in report["results"] if "broken" in r["version"]]
    for r in report["results"]:
        for key in ("family", "version", "device", "shape", "status", "in_use"):
            if key not in r:
                problems.append(f"result without '{key}': {r}")
        if r in broken:
            continue
        if r["status"] != "ok":
            problems.append(f"{r['family']} {r['version']} {r['shape']}: {r.get('reason')}")
            continue
        if not r.get("time_us", 0) > 0:
            problems.append(f"{r['family']} {r['shape']}: no time")
        if r["family"] == "attention_memory":  # a measure of memory: the peak, not a bandwidth
            if not r.get("peak_mb", 0) > 0:
                problems.append(f"{r['family']} {r['version']} {r['shape']}: no peak memory")
        elif r["family"] not in ("autograd_overhead",) and not r.get("gb_per_s", 0) > 0:
            problems.append(f"{r['family']} {r['shape']}: no bandwidth")
        if r["family"] == "gemm" and not r.get("gflop_per_s", 0) > 0:
            problems.append("gemm without GFLOP/s")
        seen.add(r["family"])
    missing = FAMILIES - seen
    if missing:
        problems.append(f"families not covered: {sorted(missing)}")
    if len(broken) != 1 or broken[0]["status"] != "refused" or "time_us" in broken[0]:
        problems.append(f"the deliberately wrong version was not refused: {broken}")
    elif "wrong result" not in broken[0].get("reason", ""):
        problems.append("the refusal gives no reason")
    if "REFUSED" not in run.stdout:
        problems.append("the table does not show the refusal")
    for p in problems:
        print("FAIL", p)
    print("check_bench_kernels:", "FAILED" if problems else "ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
