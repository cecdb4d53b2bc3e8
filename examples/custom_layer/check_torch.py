#!/usr/bin/env python3
"""Loads the checkpoint `custom_layer train` wrote into PyTorch's own layers — Linear, LayerNorm,
GELU(approximate='tanh'), Linear — with strict=True, and checks that it classifies the MNIST test
set as ember did.

    check_torch.py CHECKPOINT MNIST_DIR EMBER_TEST_ACCURACY
Exit 77 (skipped) without PyTorch or safetensors."""
import gzip
import os
import sys

try:
    import numpy as np
    import torch
    from safetensors.torch import load_file
except ImportError as error:
    print(f"check_torch: skipped: {error}")
    sys.exit(77)


def read_idx(folder, stem):
    for name, opener in ((stem, open), (stem + ".gz", gzip.open)):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            with opener(path, "rb") as f:
                data = f.read()
            dims = data[3]
            shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
            return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
    raise SystemExit(f"check_torch: {stem} not found in {folder}")


def main():
    checkpoint, mnist, ember_accuracy = sys.argv[1], sys.argv[2], float(sys.argv[3])
    model = torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.LayerNorm(64),
                                torch.nn.GELU(approximate="tanh"), torch.nn.Linear(64, 10))
    print(model.load_state_dict(load_file(checkpoint), strict=True))
    images = torch.from_numpy(read_idx(mnist, "t10k-images-idx3-ubyte").reshape(-1, 784).astype(np.float32) / 255)
    labels = torch.from_numpy(read_idx(mnist, "t10k-labels-idx1-ubyte").astype(np.int64))
    with torch.no_grad():
        accuracy = (model(images).argmax(1) == labels).float().mean().item()
    print(f"check_torch: test accuracy {accuracy:.4f} in PyTorch, {ember_accuracy:.4f} in ember")
    # The same weights and formulas in float32: at most a few near-ties may round the other way.
    if abs(accuracy - ember_accuracy) > 1e-3:
        print("check_torch: FAIL: the accuracies differ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
