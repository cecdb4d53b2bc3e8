"""ember's autocast policy against PyTorch's, op by op (Note [autocast policy], core/ops/autocast.h).

CPU, by running both: ops_tool runs every sample of the op table that has a PyTorch spelling under
autocast to bf16 on the CPU, its floating inputs in f32 and then in bf16, and records the result's
dtype; this script evaluates each spelling on the same inputs under torch.autocast("cpu",
dtype=torch.bfloat16) and compares the dtypes at every op's boundary.

CUDA, by reading PyTorch's lists: where the installed PyTorch ships ATen/autocast_mode.h (PyPI's
wheels do; the CUDA lists are its AT_FORALL_* macros), ember's CUDA policy of each op (ops_tool
--autocast-policy) is compared with the list the op's PyTorch name is on. The CPU of this machine
cannot run CUDA autocast, so this half reads what PyTorch registers rather than running it.

Deviations ember documents (docs/ops.md, "Autocast") are listed below with their reasons and
reported as such, not as failures. Exits 77 (skipped) where PyTorch is missing."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

try:
    import numpy as np  # noqa: F401  (safetensors_lite reads into numpy)
    import torch
except ImportError as error:
    print(f"autocast_torch: skipped: PyTorch or numpy is not importable here ({error})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_lite  # noqa: E402

F = torch.nn.functional
DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16", torch.float16: "f16",
          torch.int64: "i64", torch.int32: "i32", torch.uint8: "u8", torch.bool: "u8"}

# ember's op → the PyTorch op whose CUDA list decides its policy. The fused ops start with the
# product (their ReLU and pooling are on no list); cross_entropy is log_softmax and nll_loss in
# PyTorch, both on its f32 lists.
CUDA_NAMES = {"fused::linear_relu": "linear", "fused::conv2d_relu": "conv2d",
              "fused::conv2d_relu_max_pool2d": "conv2d", "cross_entropy": "nll_loss"}
# Where ember's policy differs from PyTorch's list on purpose, and why.
DEVIATIONS = {
    ("cat", "cuda"): "PyTorch's CUDA cat is on no list but promotes its inputs by its own type promotion; "
                     "ember's ops take one dtype, so its cat promotes through autocast on both devices: "
                     "the same result dtype",
}


def cuda_lists(header):
    """{PyTorch op: policy} from the AT_FORALL_* macros of ATen/autocast_mode.h."""
    text = open(header).read()
    lists = {"AT_FORALL_LOWER_PRECISION_FP": "lower_precision", "AT_FORALL_FP32": "fp32",
             "AT_FORALL_FP32_SET_OPT_DTYPE": "fp32", "AT_FORALL_PROMOTE": "promote"}
    policy = {}
    for macro, name in lists.items():
        match = re.search(r"#define " + macro + r"\(_\)(.*?)\n\s*\n", text, re.S)
        if not match:
            raise SystemExit(f"autocast_torch: {header} has no {macro}")
        for op in re.findall(r"_\((\w+)", match.group(1)):
            policy.setdefault(op, name)
    return policy


def compare_cuda(tool):
    header = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "autocast_mode.h")
    if not os.path.exists(header):
        print(f"CUDA: not compared: PyTorch {torch.__version__} here ships no ATen/autocast_mode.h")
        return [], 0
    lists = cuda_lists(header)
    failures, compared = [], 0
    policies = subprocess.run([tool, "--autocast-policy"], check=True, capture_output=True, text=True).stdout
    for line in policies.splitlines():
        op, _, cuda = line.split()
        theirs = lists.get(CUDA_NAMES.get(op, op), "none")
        compared += 1
        if cuda == theirs:
            continue
        reason = DEVIATIONS.get((op, "cuda"))
        if reason:
            print(f"deviation: {op} on CUDA: ember {cuda}, PyTorch {theirs}: {reason}")
        else:
            failures.append(f"{op} on CUDA: ember {cuda}, PyTorch's list says {theirs}")
    return failures, compared


def compare_cpu(ember, metadata):
    failures, compared = [], 0
    for name in sorted(key[:-len(".autocast")] for key in metadata if key.endswith(".autocast")):
        expected = metadata[f"{name}.autocast"].split(",")
        for k, in_dtype in enumerate((torch.float32, torch.bfloat16)):
            inputs, i = {}, 0
            while f"{name}.in.{i}" in ember:
                t = torch.from_numpy(ember[f"{name}.in.{i}"].copy())
                inputs[f"x{i}"] = t.to(in_dtype) if t.is_floating_point() else t
                i += 1
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                try:
                    out = eval(metadata[f"{name}.torch"], {"torch": torch, "F": F, **inputs})
                    got = DTYPES.get(out.dtype, str(out.dtype))
                except RuntimeError as error:  # an op this PyTorch has no bf16 CPU kernel for
                    got = f"no kernel ({str(error).splitlines()[0][:60]})"
            compared += 1
            if got != expected[k]:
                failures.append(f"{name} ({metadata[f'{name}.label']}), inputs {DTYPES[in_dtype]}: "
                                f"ember gives {expected[k]}, PyTorch {got}")
    return failures, compared


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True, help="path of the ops_tool program")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        out_path = os.path.join(work, "out.safetensors")
        subprocess.run([args.tool, out_path], check=True)
        ember, metadata = safetensors_lite.load(out_path)
    cpu_failures, cpu_compared = compare_cpu(ember, metadata)
    cuda_failures, cuda_compared = compare_cuda(args.tool)
    for failure in cpu_failures + cuda_failures:
        print(f"FAIL {failure}")
    print(f"autocast_torch: CPU: {cpu_compared} result dtypes under bf16 autocast compared with PyTorch "
          f"{torch.__version__} ({len(cpu_failures)} differ); CUDA: {cuda_compared} ops' policies compared with "
          f"its lists: {'FAILED' if cpu_failures or cuda_failures else 'ok'}")
    return 1 if cpu_failures or cuda_failures else 0


if __name__ == "__main__":
    sys.exit(main())
