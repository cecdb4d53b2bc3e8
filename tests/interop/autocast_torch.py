"""ember's autocast policy against PyTorch's, op by op (Note [autocast policy], core/ops/autocast.h).

CPU, by running both: ops_tool runs every sample of the op table that has a PyTorch spelling under
autocast to bf16 on the CPU, its floating inputs in f32 and then in bf16, and records the result's
dtype; this script evaluates each spelling on the same inputs under torch.autocast("cpu",
dtype=torch.bfloat16) and compares the dtypes at every op's boundary.

CUDA, by reading PyTorch's lists: where the installed PyTorch's ATen/autocast_mode.h holds them
(its AT_FORALL_* macros, in recent PyTorch 2.x as PyPI's wheels ship it), ember's CUDA policy of
each op (ops_tool --autocast-policy) is compared with the list the op's PyTorch name is on. The CPU
of this machine cannot run CUDA autocast, so this half reads what PyTorch registers rather than
running it. Older headers (PyTorch 1.x, such as Debian's libtorch-dev 1.13, and early 2.x) keep
the lists in autocast_mode.cpp, which is not installed: there the CUDA half is skipped, saying so,
and the CPU half still runs. --header reads another copy of the header instead.

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
from torch_spelling import missing_functions  # noqa: E402

F = torch.nn.functional
DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16", torch.float16: "f16",
          torch.int64: "i64", torch.int32: "i32", torch.uint8: "u8", torch.bool: "u8"}

# ember's op → the PyTorch op whose CUDA list decides its policy. The fused ops start with the
# product (their ReLU and pooling are on no list); cross_entropy is log_softmax and nll_loss in
# PyTorch, both on its f32 lists; the attention over heads in rows and over one packed qkv are
# scaled_dot_product_attention on other views of the same values.
CUDA_NAMES = {"fused::linear_relu": "linear", "fused::conv2d_relu": "conv2d",
              "fused::conv2d_relu_max_pool2d": "conv2d", "cross_entropy": "nll_loss",
              "scaled_dot_product_attention_heads": "scaled_dot_product_attention",
              "scaled_dot_product_attention_qkv": "scaled_dot_product_attention"}
# Where ember's policy differs from PyTorch's list on purpose, and why.
DEVIATIONS = {
    ("cat", "cuda"): "PyTorch's CUDA cat is on no list but promotes its inputs by its own type promotion; "
                     "ember's ops take one dtype, so its cat promotes through autocast on both devices: "
                     "the same result dtype",
}


# The CUDA lists of ATen/autocast_mode.h, each macro's policy; all four are needed to read a policy.
LISTS = {"AT_FORALL_LOWER_PRECISION_FP": "lower_precision", "AT_FORALL_FP32": "fp32",
         "AT_FORALL_FP32_SET_OPT_DTYPE": "fp32", "AT_FORALL_PROMOTE": "promote"}


def macro_body(text, macro):
    """The body of `#define MACRO(_) ...`, its continued lines joined; None where it is not defined."""
    match = re.search(r"^[ \t]*#[ \t]*define[ \t]+" + macro + r"\(_\)((?:[^\n]*\\\n)*[^\n]*)", text, re.M)
    return match.group(1).replace("\\\n", " ") if match else None


def cuda_lists(header):
    """({PyTorch op: policy}, None) from the AT_FORALL_* macros of ATen/autocast_mode.h, or (None, why
    not) where the header does not define them all."""
    text = open(header, encoding="utf-8", errors="replace").read()
    bodies = {macro: macro_body(text, macro) for macro in LISTS}
    missing = [macro for macro, body in bodies.items() if body is None]
    if len(missing) == len(LISTS):
        return None, ("predates the AT_FORALL_* lists (PyTorch 1.x and early 2.x keep CUDA's lists in "
                      "autocast_mode.cpp, which is not installed)")
    if missing:
        return None, f"has some AT_FORALL_* lists but not {', '.join(missing)}"
    policy = {}
    for macro, name in LISTS.items():
        for op in re.findall(r"\b_\(\s*(\w+)", bodies[macro]):
            policy.setdefault(op, name)
    return policy, None


def compare_cuda(tool, header):
    """(failures, ops compared, why not compared)."""
    if not os.path.exists(header):
        return [], 0, "does not exist"
    lists, why_not = cuda_lists(header)
    if lists is None:
        return [], 0, why_not
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
    return failures, compared, None


def compare_cpu(ember, metadata):
    failures, compared = [], 0
    for name in sorted(key[:-len(".autocast")] for key in metadata if key.endswith(".autocast")):
        expected = metadata[f"{name}.autocast"].split(",")
        missing = missing_functions(metadata[f"{name}.torch"])
        if missing:
            print(f"autocast_torch: {name} left out: PyTorch {torch.__version__} has no {', '.join(missing)}")
            continue
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
    parser.add_argument("--header", default=os.path.join(os.path.dirname(torch.__file__), "include", "ATen",
                                                         "autocast_mode.h"),
                        help="the ATen/autocast_mode.h whose CUDA lists are read (default: the installed PyTorch's)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        out_path = os.path.join(work, "out.safetensors")
        subprocess.run([args.tool, out_path], check=True)
        ember, metadata = safetensors_lite.load(out_path)
    cpu_failures, cpu_compared = compare_cpu(ember, metadata)
    cuda_failures, cuda_compared, cuda_skipped = compare_cuda(args.tool, args.header)
    for failure in cpu_failures + cuda_failures:
        print(f"FAIL {failure}")
    cuda = (f"not compared: {args.header} {cuda_skipped}" if cuda_skipped else
            f"{cuda_compared} ops' policies compared with the lists of {args.header}")
    print(f"autocast_torch: CPU: {cpu_compared} result dtypes under bf16 autocast compared with PyTorch "
          f"{torch.__version__} ({len(cpu_failures)} differ); CUDA: {cuda}: "
          f"{'FAILED' if cpu_failures or cuda_failures else 'ok'}")
    return 1 if cpu_failures or cuda_failures else 0


if __name__ == "__main__":
    sys.exit(main())
