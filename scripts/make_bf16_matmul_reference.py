#!/usr/bin/python3
"""PyTorch's bf16 matmuls on CPU, the reference for dtensor's bf16 GEMM (kernels/ops_matmul.cc).

Writes tests/reference/bf16_matmul.safetensors: bf16 inputs x [67, 300], w [53, 300], b [53],
m [300, 41] (seeded normal values rounded to bf16) and torch's bf16 results linear = F.linear(x, w,
b), linear_gelu = gelu_tanh(linear) computed in f32 and rounded once (torch 1.13's own bf16 gelu
kernel is less precise: it differs from that on 1393 of these 3551 values, 143 of them beyond
torch's bf16 tolerance), mm = x @ m; and, for
scale, the same products in float64 of the same bf16 values (linear_f64, mm_f64). K = 300 is long
enough for the order of the f32 sums to show in the last bf16 bit now and then.
Run: /usr/bin/python3 scripts/make_bf16_matmul_reference.py
"""
import os

import torch
import torch.nn.functional as F

from safetensors_writer import save_file

torch.manual_seed(33)
bf = torch.bfloat16
x = torch.randn(67, 300).to(bf)
w = (torch.randn(53, 300) / 300 ** 0.5).to(bf)
b = (torch.randn(53) * 0.1).to(bf)
m = (torch.randn(300, 41) / 300 ** 0.5).to(bf)
linear = F.linear(x, w, b)
out = {
    "x": x, "w": w, "b": b, "m": m,
    "linear": linear,
    "linear_gelu": F.gelu(linear.float(), approximate="tanh").to(bf),
    "mm": x @ m,
    "linear_f64": F.linear(x.double(), w.double(), b.double()),
    "mm_f64": x.double() @ m.double(),
}
here = os.path.dirname(os.path.abspath(__file__))
save_file(out, os.path.join(here, "..", "tests", "reference", "bf16_matmul.safetensors"))
print("torch", torch.__version__, {k: tuple(v.shape) for k, v in out.items()})
