#!/usr/bin/env python3
"""Exports one-op ONNX models for the importer's Conv, Einsum, TopK and ScatterND converters, with
PyTorch 1.13 (/usr/bin/python3, Debian's python3-torch), for tests/reference/onnx/ops/ (issue 27.5).
CI never runs this script.

    /usr/bin/python3 scripts/make_onnx_op_reference.py [--out tests/reference/onnx/ops]

Per CASE: CASE.onnx (torch.onnx.export, opset 17, default options) and CASE_io.safetensors with the
inputs by name and PyTorch's outputs `output0`, `output1`, ... For the convolutions, whose weight and
bias are initializers (parameters on import), also `r` (a random cotangent of the output's shape)
and PyTorch's gradients of sum(output0 * r): `grad.x`, `grad.weight`, `grad.bias`; the same for
scatternd_gradient (Hugging Face style writes into an activation, exported as ScatterND), with
`grad.NAME` for its parameters and floating inputs. Small shapes,
seeded: the same torch version writes the same files, except the convolutions, whose modules are
built when the script loads, before the seed (a rerun rewrites their weights: keep the committed ones).
"""
import argparse
import os

import torch
import torch.nn as nn

from safetensors_writer import save_file


class Conv(nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x):
        return self.conv(x)


class Einsum(nn.Module):
    def __init__(self, eq):
        super().__init__()
        self.eq = eq

    def forward(self, *xs):
        return torch.einsum(self.eq, *xs)


class TopK(nn.Module):
    def __init__(self, k, dim, largest):
        super().__init__()
        self.k, self.dim, self.largest = k, dim, largest

    def forward(self, x):
        return torch.topk(x, self.k, dim=self.dim, largest=self.largest, sorted=True)


class KvCacheUpdate(nn.Module):
    """A static KV cache written at the given positions (transformers' StaticCache.update:
    k_out[:, :, cache_position] = key_states), exported as ScatterND."""

    def forward(self, cache, positions, k):
        cache = cache.clone()
        cache[:, :, positions] = k
        return cache


class IndexPutGradient(nn.Module):
    """Writes into an activation the way Hugging Face code does, between projections whose weights
    are parameters (Conv1D style, x @ w + b), so gradients flow through both ScatterNDs to the data
    (the positions not written) and to the updates: `h[:, idx] = ...` (indices [n, 1] after the
    exporter's transpose; a static cache's write) then `h[b, s] = ...` (index tuples [n, 2]), the
    second overwriting some of the first's positions."""

    def __init__(self, d_in=4, hidden=6, d_out=5):
        super().__init__()
        self.w_in = nn.Parameter(torch.randn(d_in, hidden) * 0.5)
        self.b_in = nn.Parameter(torch.randn(hidden) * 0.1)
        self.w_upd = nn.Parameter(torch.randn(d_in, hidden) * 0.5)
        self.w_out = nn.Parameter(torch.randn(hidden, d_out) * 0.5)

    def forward(self, x, idx, v, b, s, c):
        h = x @ self.w_in + self.b_in
        h[:, idx] = v @ self.w_upd
        h[b, s] = c * 2.0
        return torch.tanh(h) @ self.w_out


class RowsUpdate(nn.Module):
    """x[idx] = v on rows: ScatterND with indices [n, 1]."""

    def forward(self, x, idx, v):
        x = x.clone()
        x[idx] = v
        return x


CONVS = {
    # name: (module, input shape)
    "conv1d": (nn.Conv1d(4, 6, kernel_size=3, stride=2, padding=1, dilation=2, groups=2), (2, 4, 11)),
    "conv1d_nobias": (nn.Conv1d(3, 5, kernel_size=2, bias=False), (2, 3, 7)),
    "conv2d": (nn.Conv2d(4, 6, kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2), (2, 4, 9, 8)),
    "conv2d_depthwise": (nn.Conv2d(3, 6, kernel_size=3, padding=1, groups=3), (1, 3, 5, 6)),
    "conv2d_patch": (nn.Conv2d(3, 8, kernel_size=4, stride=4), (2, 3, 8, 12)),
}

EINSUMS = {
    "einsum_bmm": ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    "einsum_heads": ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    "einsum_linear": ("bsh,dh->bsd", [(2, 3, 4), (5, 4)]),
    "einsum_transpose": ("ij->ji", [(3, 4)]),
    "einsum_outer": ("i,j->ij", [(3,), (4,)]),
    "einsum_rowdot": ("bi,bi->b", [(3, 5), (3, 5)]),
    "einsum_sum": ("ijk->i", [(3, 4, 5)]),
    "einsum_matvec": ("ij,j->i", [(3, 4), (4,)]),
    "einsum_permute3": ("abc,cd->dba", [(2, 3, 4), (4, 5)]),
}

TOPKS = {
    "topk_largest": ((3, 7), 3, -1, True),
    "topk_smallest_dim0": ((6, 4), 2, 0, False),
    "topk_3d": ((2, 5, 3), 4, 1, True),
}


def export(model, name, inputs, out_dir, n_outputs=1):
    path = os.path.join(out_dir, name + ".onnx")
    with torch.no_grad():
        outs = model(*inputs.values())
        if not isinstance(outs, tuple):
            outs = (outs,)
        torch.onnx.export(model, tuple(inputs.values()), path, input_names=list(inputs),
                          output_names=[f"output{i}" for i in range(n_outputs)], opset_version=17)
    tensors = dict(inputs)
    for i, o in enumerate(outs):
        tensors[f"output{i}"] = o.contiguous()
    return tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "reference", "onnx", "ops"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    for name, (conv, shape) in CONVS.items():
        model = Conv(conv)
        x = torch.randn(shape)
        t = export(model, name, {"x": x}, args.out)
        # Gradients of sum(y * r) for a random r.
        xg = x.clone().requires_grad_(True)
        y = model(xg)
        r = torch.randn(y.shape)
        (y * r).sum().backward()
        t["r"] = r
        t["grad.x"] = xg.grad
        t["grad.weight"] = conv.weight.grad
        if conv.bias is not None:
            t["grad.bias"] = conv.bias.grad
        save_file(t, os.path.join(args.out, name + "_io.safetensors"))
    for name, (eq, shapes) in EINSUMS.items():
        xs = {f"x{i}": torch.randn(s) for i, s in enumerate(shapes)}
        save_file(export(Einsum(eq), name, xs, args.out), os.path.join(args.out, name + "_io.safetensors"))
    for name, (shape, k, dim, largest) in TOPKS.items():
        # Distinct values: the order of ties is not the test's subject (the IR op's unit tests have it).
        x = torch.randperm(torch.Size(shape).numel()).float().reshape(shape) * 0.25 - 3
        save_file(export(TopK(k, dim, largest), name, {"x": x}, args.out, 2), os.path.join(args.out, name + "_io.safetensors"))
    cache = torch.randn(2, 3, 8, 4)
    t = export(KvCacheUpdate(), "scatternd_kv_cache",
               {"cache": cache, "positions": torch.tensor([5, 2]), "k": torch.randn(2, 3, 2, 4)}, args.out)
    save_file(t, os.path.join(args.out, "scatternd_kv_cache_io.safetensors"))
    t = export(RowsUpdate(), "scatternd_rows",
               {"x": torch.randn(6, 3), "idx": torch.tensor([4, 0, 3]), "v": torch.randn(3, 3)}, args.out)
    save_file(t, os.path.join(args.out, "scatternd_rows_io.safetensors"))
    # Gradients through ScatterND: of sum(output0 * r) for the parameters (grad.NAME) and the
    # floating inputs x, v, c (grad.x, ...).
    model = IndexPutGradient()
    inputs = {"x": torch.randn(2, 7, 4), "idx": torch.tensor([5, 1, 3]), "v": torch.randn(2, 3, 4),
              "b": torch.tensor([1, 0, 1]), "s": torch.tensor([1, 6, 2]), "c": torch.randn(3, 6)}
    t = export(model, "scatternd_gradient", inputs, args.out)
    leaves = {k: v.clone().requires_grad_(True) if v.is_floating_point() else v for k, v in inputs.items()}
    y = model(*leaves.values())
    r = torch.randn(y.shape)
    (y * r).sum().backward()
    t["r"] = r
    for k, v in leaves.items():
        if v.is_floating_point():
            t["grad." + k] = v.grad
    for k, p in model.named_parameters():
        t["grad." + k] = p.grad
    save_file(t, os.path.join(args.out, "scatternd_gradient_io.safetensors"))
    print("wrote", len(os.listdir(args.out)), "files to", args.out)


if __name__ == "__main__":
    main()
