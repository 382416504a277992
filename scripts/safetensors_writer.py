"""Writes a safetensors file from torch tensors, for the reference-data scripts beside it (the
format is small enough to write by hand, and Debian's torch comes without the safetensors package)."""
import json
import struct

import torch

DTYPE_NAMES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.bool: "BOOL", torch.bfloat16: "BF16"}


def save_file(tensors, path):
    header, blobs, at = {}, [], 0
    for key in sorted(tensors):
        t = tensors[key].contiguous()
        # numpy has no bfloat16: its bits go out as int16 (the same bytes).
        blob = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[key] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
