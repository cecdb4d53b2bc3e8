"""A few lines of Python that read and write safetensors files with numpy, for machines without
the `safetensors` package (Debian has none). The format: an 8-byte little-endian header length,
a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then raw data."""
import json
import os
import struct
import sys

import numpy as np


def without_reference(test):
    """Called where PyPI's safetensors, the reference reader and writer, is missing and this module
    stands in for it. scripts/test.sh installs the package and sets EMBER_TEST_SETUP=complete:
    there its absence is a failed install step, and the test fails rather than pass on the
    stand-in alone."""
    if os.environ.get("EMBER_TEST_SETUP") == "complete":
        print(f"{test}: error: PyPI's safetensors is not importable, although scripts/test.sh installed it "
              f"(see install_deps' output; Python: {sys.executable})")
        sys.exit(1)


_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "U8": np.uint8}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        array = np.frombuffer(body[begin:end], dtype=_DTYPES[info["dtype"]]).reshape(info["shape"])
        tensors[name] = array.copy()
    return tensors, metadata


def save(path, tensors, metadata=None):
    header, chunks, offset = {}, [], 0
    for name, array in tensors.items():
        array = np.asarray(array)
        shape = list(array.shape)  # before any copy: ascontiguousarray would turn a scalar into [1]
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": _NAMES[array.dtype], "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for chunk in chunks:
            f.write(chunk)
