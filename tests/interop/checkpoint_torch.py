"""A model saved by `mnist_train --save` loads into PyTorch as it is: the model file, read with
safetensors.torch.load_file (PyPI's safetensors, the reference reader), goes into the equivalent
torch.nn.Sequential with load_state_dict(strict=True) — for the MLP and for the CNN — and gives the
same predictions as mnist_predict on 500 test images, with the input scaling the file records.
Where the safetensors package is missing, a few lines of numpy read the file instead (said so in
the output). Exits 77 (skipped) where PyTorch or the MNIST files are missing."""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as error:
    print(f"checkpoint_torch: skipped: PyTorch or numpy is not importable here ({error})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_lite  # noqa: E402

COUNT = 500


def load_file(path):
    try:
        from safetensors.torch import load_file as reference
        return reference(path), "safetensors package"
    except ImportError:
        safetensors_lite.without_reference("checkpoint_torch")
        tensors, _ = safetensors_lite.load(path)
        return {k: torch.from_numpy(v) for k, v in tensors.items()}, "safetensors_lite (no safetensors package)"


def metadata(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n)).get("__metadata__", {})


def torch_mlp(hidden):
    return torch.nn.Sequential(torch.nn.Linear(784, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


def torch_cnn(c1, c2, hidden):
    """The CNN of PyTorch's MNIST example as a Sequential (ember names its modules by position)."""
    return torch.nn.Sequential(torch.nn.Conv2d(1, c1, 3), torch.nn.ReLU(), torch.nn.Conv2d(c1, c2, 3), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Dropout(0.25), torch.nn.Flatten(),
                               torch.nn.Linear(c2 * 12 * 12, hidden), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                               torch.nn.Linear(hidden, 10))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--predict", required=True)
    parser.add_argument("--data", required=True)
    args = parser.parse_args()
    test_images = os.path.join(args.data, "t10k-images-idx3-ubyte.gz")
    if not os.path.exists(test_images):
        print(f"checkpoint_torch: skipped: no MNIST files in {args.data}")
        return 77
    torch.set_num_threads(1)
    raw = gzip.decompress(open(test_images, "rb").read())
    pixels = np.frombuffer(raw[16:], dtype=np.uint8).reshape(-1, 28, 28)[:COUNT]
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        cases = [("mlp", ["--hidden", "32"], torch_mlp(32)),
                 ("cnn", ["--model", "cnn", "--channels", "4,8", "--hidden", "16"], torch_cnn(4, 8, 16))]
        for name, flags, model in cases:
            path = os.path.join(work, f"{name}.safetensors")
            subprocess.run([args.train, "--data", args.data, "--epochs", "1", "--val-size", "0", "--workers", "0",
                            *flags, "--save", path], check=True, stdout=subprocess.DEVNULL)
            state, reader = load_file(path)
            result = model.load_state_dict(state, strict=True)  # raises on a missing or unexpected key
            model.eval()
            meta = metadata(path)
            mean, std = float(meta["input_mean"]), float(meta["input_std"])
            x = torch.from_numpy((pixels.astype(np.float32) / 255.0 - mean) / std)
            x = x.reshape(COUNT, 1, 28, 28) if name == "cnn" else x.reshape(COUNT, 784)
            with torch.no_grad():
                probs = torch.softmax(model(x), dim=1).numpy()
            out = subprocess.run([args.predict, "--model", path, "--device", "cpu", "--idx", test_images, "--index",
                                  "0", "--count", str(COUNT), "--json"], check=True, capture_output=True,
                                 text=True).stdout
            lines = [json.loads(line) for line in out.splitlines()]
            ember_pred = np.array([line["prediction"] for line in lines])
            ember_top = np.array([line["top3"][0]["probability"] for line in lines])
            agree = int((ember_pred == probs.argmax(1)).sum())
            diff = float(np.abs(ember_top - probs[np.arange(COUNT), ember_pred]).max())
            print(f"{name}: {reader}, strict load ({result}), inputs (x/255 - {mean:.4f}) / {std:.4f}: "
                  f"{agree}/{COUNT} predictions agree, max |probability difference| {diff:.2g}")
            failures += agree != COUNT or diff > 1e-4
    print("checkpoint_torch:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
