"""Checkpoints move between ember and PyTorch in both directions: an ember checkpoint of
Sequential(Linear(784,H), ReLU, Linear(H,10)) loads into torch.nn.Sequential with
load_state_dict and gives the same logits within 1e-5, and a PyTorch state_dict saved as
safetensors loads into ember likewise. Exits 77 (skipped) where PyTorch is missing."""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as error:
    print(f"torch_interop: skipped: PyTorch or numpy is not importable here ({error})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_lite  # noqa: E402


def torch_mlp(hidden):
    return torch.nn.Sequential(torch.nn.Linear(784, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


def half_types(tool, work):
    """bf16 and f16 both ways through safetensors' BF16 and F16, read and written by the safetensors
    package: ember's f32 → bf16/f16 bits against PyTorch's on values that hit every rounding case
    (NaN only as NaN: PyTorch's vector and scalar paths give different NaN bits), and PyTorch's
    bf16/f16 widened by ember against PyTorch's widening, bit for bit."""
    try:
        from safetensors.torch import load_file, save_file
    except ImportError:
        print("bf16/f16: skipped: the safetensors package is not installed (numpy has no bfloat16)")
        return 0 if os.environ.get("EMBER_TEST_SETUP") != "complete" else 1
    rng = np.random.default_rng(3)
    specials = [0.0, -0.0, 1.0, 65504.0, 65519.996, 65520.0, 3.39e38, 3.4e38, 1e-40, 6e-8, 2.98e-8, -3e-8,
                np.inf, -np.inf, np.nan]
    ties = [1 + (2 * k + 1) * 2.0 ** -9 for k in range(8)] + [1 + (2 * k + 1) * 2.0 ** -11 for k in range(8)]
    x = np.concatenate([np.array(specials + ties, dtype=np.float32),
                        (np.exp2(rng.uniform(-30, 40, 4000)) * rng.choice([-1, 1], 4000)).astype(np.float32),
                        rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    xt = torch.from_numpy(x)
    inputs, out = os.path.join(work, "half_in.safetensors"), os.path.join(work, "half_out.safetensors")
    save_file({"x": xt, "bf16": xt.to(torch.bfloat16), "f16": xt.to(torch.float16)}, inputs)
    subprocess.run([tool, "cast", inputs, out], check=True)
    got = load_file(out)
    failures = 0
    for name, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        mine, theirs = got[name], xt.to(dtype)
        if mine.dtype != dtype:
            print(f"{name}: ember's file loads in PyTorch as {mine.dtype}, not {dtype}")
            failures += 1
            continue
        nan = torch.isnan(theirs)
        same_bits = torch.equal(mine.view(torch.int16)[~nan], theirs.view(torch.int16)[~nan])
        same_nans = torch.equal(torch.isnan(mine), nan)
        print(f"{name}: ember's f32 -> {name} of {len(x)} values loads in PyTorch as {mine.dtype}; same bits as "
              f"PyTorch's: {same_bits}; NaN where PyTorch's: {same_nans}")
        failures += not (same_bits and same_nans)
        wide, want = got[name + "_wide"], xt.to(dtype).float()
        nan = torch.isnan(want)
        exact = torch.equal(wide.view(torch.int32)[~nan], want.view(torch.int32)[~nan]) and \
            torch.equal(torch.isnan(wide), nan)
        print(f"{name}: PyTorch's {name} widened by ember to f32: the same bits as PyTorch's .float(): {exact}")
        failures += not exact
    return failures


def forward_in(model, x, dtype):
    """The model's logits in dtype, widened to f32. Where this PyTorch has no CPU kernel for the
    dtype (1.13's f16 linear), each layer in f32 from the dtype's values, rounded to it once — how
    the dtype's kernels compute."""
    with torch.no_grad():
        xt = torch.from_numpy(x).to(dtype)
        try:
            return model(xt).float()
        except RuntimeError:
            for layer in model:
                xt = layer.float()(xt.float()).to(dtype)
                layer.to(dtype)
            return xt.float()


def half_models(tool, work, x, hidden):
    """An MLP converted to bf16 and to f16 by ember (Module::to) loads in PyTorch through the
    safetensors package as it is: a bf16/f16 state dict whose values are ember's f32 parameters
    rounded by PyTorch, bit for bit, and whose logits in that dtype are PyTorch's within the dtype's
    rounding; and PyTorch's bf16/f16 model loads into ember likewise."""
    try:
        from safetensors.torch import load_file, save_file
    except ImportError:
        print("bf16/f16 models: skipped: the safetensors package is not installed")
        return 0 if os.environ.get("EMBER_TEST_SETUP") != "complete" else 1
    failures = 0
    inputs = os.path.join(work, "inputs.safetensors")
    for name, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        ckpt = os.path.join(work, f"mlp_{name}.safetensors")
        subprocess.run([tool, "save-mlp-as", ckpt, str(hidden), "5", name], check=True)
        state, wide = load_file(ckpt), load_file(ckpt + ".f32")
        same = all(state[k].dtype == dtype
                   and torch.equal(state[k].view(torch.int16), wide[k].to(dtype).view(torch.int16))
                   for k in wide)
        model = torch_mlp(hidden).to(dtype)
        model.load_state_dict(state, strict=True)
        torch_logits = forward_in(model, x, dtype)
        out = os.path.join(work, f"logits_{name}.safetensors")
        subprocess.run([tool, "forward-as", ckpt, str(hidden), name, inputs, out], check=True)
        # Each layer's output is rounded to the dtype once in both (from f32 sums in their own
        # orders): logits of size ~1 may differ by an ulp or two of the dtype (2^-7 for bf16).
        tol = 2.0 ** -5 if name == "bf16" else 2.0 ** -8
        diff = float((torch_logits - load_file(out)["logits"]).abs().max())
        print(f"{name} MLP ember -> torch: loads as {dtype}, PyTorch's rounding of ember's f32 bit for bit: {same}; "
              f"max |logits difference| = {diff:.3g} (tolerance {tol:g})")
        failures += not same or diff > tol
        torch.manual_seed(13)
        model = torch_mlp(hidden).to(dtype)
        theirs = os.path.join(work, f"torch_mlp_{name}.safetensors")
        save_file(model.state_dict(), theirs)
        torch_logits = forward_in(model, x, dtype)
        subprocess.run([tool, "forward-as", theirs, str(hidden), name, inputs, out], check=True)
        diff = float((torch_logits - load_file(out)["logits"]).abs().max())
        print(f"{name} MLP torch -> ember: max |logits difference| = {diff:.3g} (tolerance {tol:g})")
        failures += diff > tol
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True, help="path of the interop_tool program")
    args = parser.parse_args()
    hidden = 32
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        x = np.random.default_rng(0).random((16, 784), dtype=np.float32)
        inputs = os.path.join(work, "inputs.safetensors")
        safetensors_lite.save(inputs, {"x": x})

        # ember → PyTorch
        ember_ckpt = os.path.join(work, "ember.safetensors")
        subprocess.run([args.tool, "save-mlp", ember_ckpt, str(hidden), "42"], check=True)
        state, metadata = safetensors_lite.load(ember_ckpt)
        model = torch_mlp(hidden)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=True)
        with torch.no_grad():
            torch_logits = model(torch.from_numpy(x)).numpy()
        ember_out = os.path.join(work, "ember_logits.safetensors")
        subprocess.run([args.tool, "forward", ember_ckpt, str(hidden), inputs, ember_out], check=True)
        ember_logits = safetensors_lite.load(ember_out)[0]["logits"]
        diff = float(np.abs(torch_logits - ember_logits).max())
        print(f"ember -> torch: metadata {sorted(metadata)}; max |logits difference| = {diff:.3g}")
        failures += diff > 1e-5

        # PyTorch → ember (the real safetensors package when it is installed)
        torch.manual_seed(7)
        model = torch_mlp(hidden)
        torch_ckpt = os.path.join(work, "torch.safetensors")
        try:
            from safetensors.torch import save_file
            save_file(model.state_dict(), torch_ckpt)
            writer = "safetensors package"
        except ImportError:
            safetensors_lite.without_reference("interop_torch")
            safetensors_lite.save(torch_ckpt, {k: v.numpy() for k, v in model.state_dict().items()})
            writer = "safetensors_lite"
        with torch.no_grad():
            torch_logits = model(torch.from_numpy(x)).numpy()
        torch_out = os.path.join(work, "torch_logits.safetensors")
        subprocess.run([args.tool, "forward", torch_ckpt, str(hidden), inputs, torch_out], check=True)
        ember_logits = safetensors_lite.load(torch_out)[0]["logits"]
        diff = float(np.abs(torch_logits - ember_logits).max())
        print(f"torch -> ember ({writer}): max |logits difference| = {diff:.3g}")
        failures += diff > 1e-5

        # The CNN, both ways, and a net with batch normalization (its running statistics and the
        # int64 num_batches_tracked) from PyTorch.
        def cnn():
            return torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3),
                                       torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Dropout(0.25),
                                       torch.nn.Flatten(), torch.nn.Linear(16 * 12 * 12, 32), torch.nn.ReLU(),
                                       torch.nn.Dropout(0.5), torch.nn.Linear(32, 10))
        ximg = torch.from_numpy(x).reshape(-1, 1, 28, 28)
        ember_cnn = os.path.join(work, "cnn.safetensors")
        subprocess.run([args.tool, "save-cnn", ember_cnn, "3"], check=True)
        model = cnn()
        model.load_state_dict({k: torch.from_numpy(v) for k, v in safetensors_lite.load(ember_cnn)[0].items()},
                              strict=True)
        model.eval()
        with torch.no_grad():
            torch_logits = model(ximg).numpy()
        out = os.path.join(work, "cnn_logits.safetensors")
        subprocess.run([args.tool, "forward-cnn", ember_cnn, inputs, out], check=True)
        diff = float(np.abs(torch_logits - safetensors_lite.load(out)[0]["logits"]).max())
        print(f"CNN ember -> torch: max |logits difference| = {diff:.3g}")
        failures += diff > 1e-5
        torch.manual_seed(11)
        model = cnn().eval()
        torch_cnn = os.path.join(work, "torch_cnn.safetensors")
        safetensors_lite.save(torch_cnn, {k: v.numpy() for k, v in model.state_dict().items()})
        with torch.no_grad():
            torch_logits = model(ximg).numpy()
        subprocess.run([args.tool, "forward-cnn", torch_cnn, inputs, out], check=True)
        diff = float(np.abs(torch_logits - safetensors_lite.load(out)[0]["logits"]).max())
        print(f"CNN torch -> ember: max |logits difference| = {diff:.3g}")
        failures += diff > 1e-5
        bn = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                 torch.nn.Flatten(), torch.nn.Linear(4 * 26 * 26, 10))
        with torch.no_grad():
            for _ in range(3):
                bn(torch.rand(16, 1, 28, 28))  # training steps move the running statistics
        bn.eval()
        torch_bn = os.path.join(work, "torch_bn.safetensors")
        state = {k: v.numpy() for k, v in bn.state_dict().items()}
        assert state["1.num_batches_tracked"].dtype == np.int64
        safetensors_lite.save(torch_bn, state)
        with torch.no_grad():
            torch_logits = bn(ximg).numpy()
        subprocess.run([args.tool, "forward-bn", torch_bn, inputs, out], check=True)
        diff = float(np.abs(torch_logits - safetensors_lite.load(out)[0]["logits"]).max())
        print(f"BatchNorm net torch -> ember (eval, running statistics): max |logits difference| = {diff:.3g}")
        failures += diff > 1e-5
        failures += half_types(args.tool, work)
        failures += half_models(args.tool, work, x, hidden)
    print("torch_interop:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
