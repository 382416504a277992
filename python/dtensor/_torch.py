"""from_torch: export a torch.nn.Module through torch.onnx, then import the file (import_onnx).

torch is imported only here, so that `import dtensor` never needs it.
"""
from __future__ import annotations

import os
import tempfile


def export_module(module, example_inputs, input_names, output_names, opset, import_onnx):
    try:
        import torch
    except ImportError as e:
        raise ImportError("dtensor.from_torch needs torch (pip install torch, or Debian's python3-torch)") from e
    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    names = list(input_names) if input_names else [f"input_{i}" if len(example_inputs) > 1 else "input"
                                                   for i in range(len(example_inputs))]
    outs = list(output_names) if output_names else None
    shapes = {n: tuple(t.shape) for n, t in zip(names, example_inputs)}
    with tempfile.TemporaryDirectory(prefix="dtensor-from-torch-") as d:
        path = os.path.join(d, "model.onnx")
        module.eval()
        with torch.no_grad():
            torch.onnx.export(module, example_inputs, path, input_names=names, output_names=outs,
                              opset_version=opset, do_constant_folding=False)
        return import_onnx(path, input_shapes=shapes)
