"""A file of PyTorch's own MNIST example loads in mnist_predict as PyTorch writes it. The CNN of
pytorch/examples' mnist/main.py, `Net`, is built here with that script's module names and layers
(conv1, conv2, dropout1, dropout2, fc1, fc2), trained for a few seeded steps on 512 training
images, and its state_dict saved with safetensors (a) with ember's metadata for the input scaling
and (b) with none. On all 10,000 test images mnist_predict must give the class PyTorch's forward
gives on inputs scaled as the example scales them, Normalize((0.1307,), (0.3081,)): from (a)
without a warning, from (b) with a warning on stderr that says what it assumed; and (c) from (b)
with --normalize 0,1, PyTorch's classes on pixel/255 (the first 2,000 images), without a
warning. Exits 77 (skipped) where PyTorch or the MNIST files are missing; without PyPI's
safetensors, safetensors_lite writes the files (a failure where scripts/test.sh installed the
package)."""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
except ImportError as error:
    print(f"example_net_torch: skipped: PyTorch or numpy is not importable here ({error})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_lite  # noqa: E402

MEAN, STD = 0.1307, 0.3081  # the example's Normalize
TRAIN_IMAGES, BATCH = 512, 64
PLAIN_IMAGES = 2000  # (c)'s images: enough to see the scaling change classes
# Classes may differ only where PyTorch's two best logits are this close: float sums in another
# order may swap them.
TIE = 1e-4


class Net(torch.nn.Module):
    """pytorch/examples' MNIST CNN, module for module: its attribute names are the file's names."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3, 1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = torch.nn.Dropout(0.25)
        self.dropout2 = torch.nn.Dropout(0.5)
        self.fc1 = torch.nn.Linear(9216, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        x = torch.flatten(self.dropout1(torch.nn.functional.max_pool2d(x, 2)), 1)
        x = self.dropout2(torch.relu(self.fc1(x)))
        return torch.log_softmax(self.fc2(x), dim=1)


def read_idx(path, offset):
    return np.frombuffer(gzip.decompress(open(path, "rb").read())[offset:], dtype=np.uint8)


def save(path, state, metadata):
    try:
        from safetensors.torch import save_file
        save_file(state, path, metadata=metadata)
    except ImportError:
        safetensors_lite.without_reference("example_net_torch")
        safetensors_lite.save(path, {k: v.numpy() for k, v in state.items()}, metadata)


def torch_logits(model, pixels, mean, std):
    x = torch.from_numpy((pixels.astype(np.float32) / 255.0 - mean) / std).reshape(-1, 1, 28, 28)
    with torch.no_grad():
        return torch.cat([model(chunk) for chunk in x.split(32)]).numpy()  # (the fastest split here)


def check(name, predict, path, test_images, flags, logits, warned):
    """mnist_predict's classes from `path` against PyTorch's `logits`; the warning as `warned` says."""
    run = subprocess.run([predict, "--model", path, "--device", "cpu", "--idx", test_images, "--count",
                          str(len(logits)), "--json", *flags], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"{name}: FAILED: mnist_predict exit {run.returncode}: {run.stderr.strip()}")
        return 1
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    ember = np.array([line["prediction"] for line in lines])
    ours = logits.argmax(1)
    top2 = np.sort(logits, axis=1)[:, -2:]
    differ = ember != ours
    near_ties = int((differ & (top2[:, 1] - top2[:, 0] < TIE)).sum())
    probs = np.exp(logits)  # log_softmax's output
    ember_top = np.array([line["top3"][0]["probability"] for line in lines])
    diff = float(np.abs(ember_top - probs[np.arange(len(ember)), ember]).max()) if len(ember) else 1.0
    warning = [line for line in run.stderr.splitlines() if line.startswith("warning:")]
    failures = []
    if len(ember) != len(logits):
        failures.append(f"{len(ember)} predictions for {len(logits)} images")
    elif int(differ.sum()) > near_ties:
        failures.append(f"{int(differ.sum()) - near_ties} classes differ from PyTorch's (first at image "
                        f"{int(np.flatnonzero(differ)[0])})")
    if diff > 1e-4:
        failures.append(f"top probabilities differ from PyTorch's by up to {diff:.2g}")
    if warned and not (warning and "records no input scaling" in warning[0] and
                       f"Normalize(({MEAN},), ({STD},))" in warning[0] and "--normalize MEAN,STD" in warning[0]):
        failures.append(f"no warning naming the assumed Normalize and --normalize: {run.stderr.strip()!r}")
    if not warned and warning:
        failures.append(f"a warning where none belongs: {warning[0]!r}")
    print(f"{name}: {len(ember) - int(differ.sum())}/{len(logits)} classes as PyTorch's"
          f"{f' ({near_ties} near-ties)' if near_ties else ''}, max |probability difference| {diff:.2g}, "
          f"{'warned: ' + warning[0] if warning else 'no warning'}"
          + "".join(f"\n  FAILED: {f}" for f in failures))
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--predict", required=True)
    parser.add_argument("--data", required=True)
    args = parser.parse_args()
    train_images = os.path.join(args.data, "train-images-idx3-ubyte.gz")
    test_images = os.path.join(args.data, "t10k-images-idx3-ubyte.gz")
    if not all(os.path.exists(p) for p in (train_images, test_images)):
        print(f"example_net_torch: skipped: no MNIST files in {args.data}")
        return 77
    start = time.time()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    images = read_idx(train_images, 16).reshape(-1, 28, 28)[:TRAIN_IMAGES]
    labels = torch.from_numpy(read_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"), 8)[:TRAIN_IMAGES]
                              .astype(np.int64))
    x = torch.from_numpy((images.astype(np.float32) / 255.0 - MEAN) / STD).reshape(-1, 1, 28, 28)
    model = Net()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)  # the example's optimizer
    model.train()
    for step in range(TRAIN_IMAGES // BATCH):
        batch = slice(step * BATCH, (step + 1) * BATCH)
        optimizer.zero_grad()
        loss = torch.nn.functional.nll_loss(model(x[batch]), labels[batch])
        loss.backward()
        optimizer.step()
    model.eval()
    test = read_idx(test_images, 16).reshape(-1, 28, 28)
    normalized, plain = torch_logits(model, test, MEAN, STD), torch_logits(model, test[:PLAIN_IMAGES], 0.0, 1.0)
    truth = read_idx(os.path.join(args.data, "t10k-labels-idx1-ubyte.gz"), 8)
    print(f"Net trained for {TRAIN_IMAGES // BATCH} steps (last loss {loss.item():.3f}): test accuracy "
          f"{(normalized.argmax(1) == truth).mean():.3f}; pixel/255 instead of Normalize changes "
          f"{int((normalized[:PLAIN_IMAGES].argmax(1) != plain.argmax(1)).sum())} of the first {PLAIN_IMAGES} classes")
    state = model.state_dict()  # conv1.weight, conv1.bias, conv2.*, fc1.*, fc2.*
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        recorded, bare = os.path.join(work, "recorded.safetensors"), os.path.join(work, "bare.safetensors")
        save(recorded, state, {"model_kind": "cnn", "input_mean": str(MEAN), "input_std": str(STD)})
        save(bare, state, None)
        failures += check("(a) with input_mean and input_std", args.predict, recorded, test_images, [], normalized,
                          warned=False)
        failures += check("(b) no metadata", args.predict, bare, test_images, [], normalized, warned=True)
        failures += check("(c) no metadata, --normalize 0,1", args.predict, bare, test_images,
                          ["--normalize", "0,1"], plain, warned=False)
    print(f"example_net_torch: {'FAILED' if failures else 'ok'} ({time.time() - start:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
