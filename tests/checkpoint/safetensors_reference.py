"""The reference safetensors implementation (the `safetensors` package, numpy flavour) on the other side
of test_safetensors_python.cpp: `write PATH` writes a file and prints what it holds; `read PATH` loads a
file the C++ writer made and prints what it holds. Printed as JSON: {name: {dtype, shape, hex}, ...}."""
import json
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

NAMES = {np.float32: "F32", np.float16: "F16", np.float64: "F64", np.int8: "I8", np.uint8: "U8",
         np.int16: "I16", np.int32: "I32", np.int64: "I64", np.uint32: "U32", np.bool_: "BOOL"}


def describe(tensors, metadata):
    out = {name: {"dtype": NAMES[a.dtype.type], "shape": list(a.shape),
                  "hex": np.ascontiguousarray(a).tobytes().hex()} for name, a in tensors.items()}
    out["__metadata__"] = metadata or {}
    return out


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "write":
        rng = np.random.default_rng(7)
        tensors = {
            "model.embed_tokens.weight": rng.standard_normal((5, 3)).astype(np.float32),
            "half": rng.standard_normal((2, 2, 2)).astype(np.float16),
            "ids": np.arange(-3, 4, dtype=np.int64),
            "mask": np.array([True, False, True]),
            "scalar": np.array(2.5, dtype=np.float64),
            "q": rng.integers(-128, 127, size=(7,), dtype=np.int8),
            "empty": np.zeros((0, 4), dtype=np.int32),
        }
        save_file(tensors, path, metadata={"format": "np", "note": "reference"})
        print(json.dumps(describe(tensors, {"format": "np", "note": "reference"})))
    else:
        with safe_open(path, framework="numpy") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}
            print(json.dumps(describe(tensors, f.metadata())))


if __name__ == "__main__":
    main()
