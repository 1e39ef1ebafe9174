"""Cross-check of txl's safetensors files against the `safetensors` package from PyPI.

Run by tests/util/safetensors_test.cpp (never by hand, though it works):

    python safetensors_check.py READ WRITE REPORT

READ   a file written by txl::safetensors::serialize; every tensor is loaded with safe_open
       (framework "pt", Debian's torch) and, where numpy has the dtype, again with framework "np"
       (the two must agree), and described in REPORT (JSON): dtype, shape, the values flattened
       and the SHA-256 of the raw little-endian bytes, plus the metadata.
WRITE  a file written by safetensors.torch.save_file with the tensors of python_tensors() and
       PYTHON_METADATA, which the C++ test parses and compares with its own copy of them.

Exit status 3 (message on stderr) when the safetensors package, torch or numpy is missing: the
test then skips.
"""

import hashlib
import json
import sys

try:
    import numpy as np
    import torch
    import safetensors
    from safetensors import safe_open
    from safetensors.torch import save_file
except ImportError as error:
    print(f"missing Python package: {error}", file=sys.stderr)
    sys.exit(3)

PYTHON_METADATA = {"written_by": "safetensors-python", "format": "pt", "unicode": "Grüße ✓ \"q\""}


def python_tensors():
    # Mirrored by python_expected() in safetensors_test.cpp; all values exact in their dtype.
    return {
        "py_f32": torch.arange(12, dtype=torch.float32).reshape(3, 4) / 8,
        "py_bf16": (torch.arange(-4, 4, dtype=torch.float32) * 0.75).to(torch.bfloat16),
        "py_f64_scalar": torch.tensor(-2.5, dtype=torch.float64),
        "py_f16": torch.tensor([[0.5, -1.0, 65504.0]], dtype=torch.float16),
        "py_i64": torch.tensor([-(2**40), 0, 2**40 + 3], dtype=torch.int64),
        "py_i32": torch.tensor([-7, 2**31 - 1], dtype=torch.int32),
        "py_i16": torch.tensor([-(2**15), 12345], dtype=torch.int16),
        "py_i8": torch.tensor([[-128, 127], [0, -1]], dtype=torch.int8),
        "py_u8": torch.arange(256, dtype=torch.int64).to(torch.uint8),
        "py_bool": torch.tensor([True, False, True]),
        "py_empty": torch.zeros((0, 3), dtype=torch.float32),
    }


def raw_bytes(tensor):
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: same bits as int16
        tensor = tensor.view(torch.int16)
    return tensor.contiguous().numpy().tobytes()


def describe(path):
    tensors = {}
    with safe_open(path, framework="pt") as pt, safe_open(path, framework="np") as npf:
        metadata = pt.metadata() or {}
        for name in pt.keys():
            tensor = pt.get_tensor(name)
            dtype = pt.get_slice(name).get_dtype()
            if tensor.dtype != torch.bfloat16:
                array = npf.get_tensor(name)
                if array.tobytes() != raw_bytes(tensor) or list(array.shape) != list(tensor.shape):
                    raise SystemExit(f"{name}: numpy and torch disagree")
            values = tensor.flatten()
            values = values.double() if tensor.is_floating_point() else values
            tensors[name] = {
                "dtype": dtype,
                "shape": list(tensor.shape),
                "values": values.tolist(),
                "sha256": hashlib.sha256(raw_bytes(tensor)).hexdigest(),
            }
    return {"safetensors_version": safetensors.__version__, "metadata": metadata, "tensors": tensors}


def main():
    if len(sys.argv) != 4:
        raise SystemExit(f"usage: {sys.argv[0]} READ WRITE REPORT")
    read_path, write_path, report_path = sys.argv[1:]
    report = describe(read_path)
    save_file(python_tensors(), write_path, metadata=PYTHON_METADATA)
    with open(report_path, "w", encoding="utf-8") as out:
        json.dump(report, out, allow_nan=False)


if __name__ == "__main__":
    main()
