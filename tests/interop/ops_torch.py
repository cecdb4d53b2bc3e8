"""Every op and module new in ember 0.2 against PyTorch on random inputs: ops_tool applies each to
the inputs written here and saves its result and the gradients of ½·Σ result²; this script
computes the same in PyTorch and compares them. Exits 77 (skipped) where PyTorch is missing."""
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

F = torch.nn.functional

# Each case: (name, inputs, function) — the same names and arguments as ops_tool.cpp's cases.
CASES = [
    ("erf", "a", lambda a: torch.erf(a)),
    ("rsqrt", "a", lambda a: torch.rsqrt(a.abs() + 0.5)),
    ("abs", "a", lambda a: a.abs()),
    ("clamp", "a", lambda a: a.clamp(-0.5, 0.7)),
    ("clamp_min", "a", lambda a: a.clamp(min=0.0)),
    ("maximum", "ab", lambda a, b: torch.maximum(a, b)),
    ("minimum", "ab", lambda a, b: torch.minimum(a, b)),
    ("where", "ab", lambda a, b: torch.where(a > b, a, b * 2.0)),
    ("where_scalar_cond", "ac", lambda a, c: torch.where(c < 0, a, c)),
    ("gt", "ab", lambda a, b: a > b),
    ("lt", "ab", lambda a, b: a < b),
    ("ge", "ac", lambda a, c: a >= c),
    ("le", "ac", lambda a, c: a <= c),
    ("eq", "ac", lambda a, c: a == c),
    ("ne", "ac", lambda a, c: a != c),
    ("var_all", "a", lambda a: a.var()),
    ("std_all", "a", lambda a: a.std()),
    ("var_dims", "a", lambda a: a.var(dim=(0, 2), correction=1, keepdim=True)),
    ("var_biased", "a", lambda a: a.var(dim=-1, correction=0)),
    ("std_dim", "a", lambda a: a.std(dim=1)),
    ("std_dims_keepdim", "a", lambda a: a.std(dim=(1, 2), correction=0, keepdim=True)),
    ("sum_dim", "a", lambda a: a.sum(-1, keepdim=True)),
    ("mean_dim", "a", lambda a: a.mean(1)),
    ("unsqueeze", "a", lambda a: a.unsqueeze(1) * 3.0),
    ("unsqueeze_end", "b", lambda b: b.unsqueeze(-1) * 3.0),
    ("permute", "a", lambda a: a.permute(2, 0, 1)),
    ("broadcast_to", "b", lambda b: torch.broadcast_to(b, (2, 4, 5))),
    ("softmax_dim0", "a", lambda a: F.softmax(a, 0)),
    ("log_softmax_dim1", "a", lambda a: F.log_softmax(a, 1)),
    ("softmax_last", "a", lambda a: F.softmax(a, -1)),
    ("Tanh", "a", torch.nn.Tanh()),
    ("Sigmoid", "a", torch.nn.Sigmoid()),
    ("GELU", "a", torch.nn.GELU()),
    ("GELU_tanh", "a", torch.nn.GELU(approximate="tanh")),
    ("Softmax", "a", torch.nn.Softmax(dim=1)),
    ("LogSoftmax", "a", torch.nn.LogSoftmax(dim=0)),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True, help="path of the ops_tool program")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    inputs = {
        "a": rng.normal(size=(3, 4, 5)),
        "b": rng.normal(size=(4, 5)),
        "c": rng.normal(size=(3, 4, 5)),
        "x": rng.normal(size=(6, 5)).astype(np.float32),
        "weight": rng.uniform(0.5, 1.5, size=5).astype(np.float32),
        "bias": rng.normal(size=5).astype(np.float32),
    }
    inputs["c"][0, 0, :3] = inputs["a"][0, 0, :3]  # some equal elements for eq/ne/ge/le
    norm = torch.nn.LayerNorm(5)
    with torch.no_grad():
        norm.weight.copy_(torch.from_numpy(inputs["weight"]))
        norm.bias.copy_(torch.from_numpy(inputs["bias"]))
    cases = CASES + [("LayerNorm", "x", norm)]

    with tempfile.TemporaryDirectory() as work:
        inputs_path, out_path = os.path.join(work, "inputs.safetensors"), os.path.join(work, "out.safetensors")
        safetensors_lite.save(inputs_path, inputs)
        subprocess.run([args.tool, inputs_path, out_path], check=True)
        ember, _ = safetensors_lite.load(out_path)

    failures, compared = 0, 0

    def compare(key, expected):
        nonlocal failures, compared
        got = ember.get(key)
        # f64 agrees to rounding (the formulas differ in order of operations, not in precision);
        # the f32 LayerNorm to f32 rounding of a mean, a variance and a division.
        tol = 1e-10 if expected.dtype == np.float64 else 1e-5
        if got is None or got.shape != expected.shape:
            print(f"FAIL {key}: ember gave {None if got is None else got.shape}, PyTorch {expected.shape}")
            failures += 1
            return
        diff = float(np.max(np.abs(got - expected) / np.maximum(1.0, np.abs(expected)), initial=0.0))
        compared += 1
        if not diff <= tol:
            print(f"FAIL {key}: max relative difference {diff:.3g} > {tol:g}")
            failures += 1

    for name, names, fn in cases:
        leaves = [torch.tensor(inputs[n], requires_grad=True) for n in names]
        out = fn(*leaves)
        if out.dtype == torch.bool:
            compare(name, out.double().numpy())
            continue
        compare(name, out.detach().numpy())
        (0.5 * (out * out).sum()).backward()
        for n, leaf in zip(names, leaves):
            compare(f"{name}.grad.{n}", leaf.grad.numpy())
        if isinstance(fn, torch.nn.Module):
            for parameter_name, parameter in fn.named_parameters():
                compare(f"{name}.grad.{parameter_name}", parameter.grad.numpy())
    print(f"ops_torch: {len(cases)} cases, {compared} results and gradients compared with PyTorch "
          f"{torch.__version__}: {'FAILED' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
