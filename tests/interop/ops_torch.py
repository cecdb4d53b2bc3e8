"""Every op of ember's op table that PyTorch has, and the modules written from ops, against PyTorch:
ops_tool runs each sample of the table (tests/support/op_table.h) in f64 and saves its inputs,
result, upstream gradient and gradients, with the sample's PyTorch spelling; this script evaluates
each spelling on the same inputs, differentiates ⟨result, upstream⟩ and compares. The case list
is the table's, so ember's and PyTorch's names cannot drift apart. Exits 77 (skipped) where
PyTorch is missing."""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as error:
    print(f"ops_torch: skipped: PyTorch or numpy is not importable here ({error})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_lite  # noqa: E402
from torch_spelling import missing_functions, older_gradient  # noqa: E402

F = torch.nn.functional


def tolerance(dtype):
    # f64 agrees to rounding (the formulas differ in order of operations, not in precision); f32
    # (the LayerNorm module, normalize_u8, gather_batch) to float rounding of a mean, a variance
    # and a division.
    return 1e-10 if dtype == np.float64 else 1e-5


def differs(got, expected):
    """Why got is not expected within tolerance, or None. NaN matches NaN, ±∞ the same ∞."""
    if got is None or got.shape != expected.shape:
        return f"ember gave {None if got is None else got.shape}, PyTorch {expected.shape}"
    tol = tolerance(expected.dtype)
    got, expected = got.astype(np.float64), expected.astype(np.float64)
    same = (got == expected) | (np.isnan(got) & np.isnan(expected))
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(got - expected) / np.maximum(1.0, np.abs(expected)))
    worst = float(np.max(np.nan_to_num(diff, nan=np.inf), initial=0.0))
    return None if worst <= tol else f"max relative difference {worst:.3g} > {tol:g}"


def case_names(metadata):
    return sorted({key[:-len(".torch")] for key in metadata if key.endswith(".torch")})


def torch_tensor(array, requires_grad):
    t = torch.from_numpy(array.copy())
    return t.requires_grad_() if requires_grad else t


def run_case(name, ember, metadata):
    """Compares one case; returns (failures, results compared), or None where this PyTorch lacks a
    function the spelling calls."""
    if missing_functions(metadata[f"{name}.torch"]):
        return None
    grads = [int(i) for i in metadata[f"{name}.grads"].split(",") if i]
    inputs = {}
    i = 0
    while f"{name}.in.{i}" in ember:
        inputs[f"x{i}"] = torch_tensor(ember[f"{name}.in.{i}"], i in grads)
        i += 1
    env = {"torch": torch, "F": F, **inputs}
    out = eval(metadata[f"{name}.torch"], env)  # the table's spelling, written for exactly this
    label = f"{name} ({metadata[f'{name}.label']})"
    failures, compared = [], 0
    # Masks, indices and counts as ember writes them: f64.
    expected = out.detach() if out.is_floating_point() else out.double()
    problem = differs(ember.get(f"{name}.out"), expected.numpy())
    compared += 1
    if problem:
        failures.append(f"{label}: result: {problem}")
    older = older_gradient(metadata[f"{name}.torch"], metadata[f"{name}.label"])
    if older:
        print(f"ops_torch: {label}: gradient not compared: {older}")
    if grads and not older:
        out.backward(torch.from_numpy(ember[f"{name}.upstream"].copy()))
        for g in grads:
            leaf = inputs[f"x{g}"]
            if leaf.grad is None:
                failures.append(f"{label}: PyTorch gives input {g} no gradient, ember does")
                continue
            compared += 1
            problem = differs(ember.get(f"{name}.grad.{g}"), leaf.grad.numpy())
            if problem:
                failures.append(f"{label}: gradient of input {g}: {problem}")
    return failures, compared


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True, help="path of the ops_tool program")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        out_path = os.path.join(work, "out.safetensors")
        subprocess.run([args.tool, out_path], check=True)
        ember, metadata = safetensors_lite.load(out_path)

    names = case_names(metadata)
    failures, compared, left_out, run = [], 0, {}, []
    for name in names:
        result = run_case(name, ember, metadata)
        if result is None:
            for function in missing_functions(metadata[f"{name}.torch"]):
                left_out[function] = left_out.get(function, 0) + 1
            continue
        run.append(name)
        failures += result[0]
        compared += result[1]
    for function, count in sorted(left_out.items()):
        print(f"ops_torch: {count} case(s) left out: PyTorch {torch.__version__} has no {function}")
    for failure in failures:
        print(f"FAIL {failure}")
    ops = sorted({name.rsplit("[", 1)[0] for name in run})
    print(f"ops_torch: {len(ops)} ops and modules, {len(run)} cases, {compared} results and gradients compared "
          f"with PyTorch {torch.__version__}: {'FAILED' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
