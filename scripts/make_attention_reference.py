#!/usr/bin/python3
"""Reference outputs and gradients of scaled_dot_product_attention with grouped-query k/v, an
explicit scale and bool/float masks, combined with the causal flag as torch 2.x's reference
implementation of F.scaled_dot_product_attention does (Debian's torch 1.13 has no F.sdpa, so it is
written here in plain torch ops).

Writes tests/reference/attention/CASE.safetensors for each case: inputs q, k, v (float64), mask
(if any: bool or float64), dout (the upstream
gradient), and torch's out, dq, dk, dv (and dmask for a float mask). Case attributes (causal,
scale) are in cases.json. Run: /usr/bin/python3 scripts/make_attention_reference.py
"""
import json
import math
import os

import torch

from safetensors_writer import save_file


def sdpa(q, k, v, mask=None, causal=False, scale=None, group=1):
    """torch 2.x's documented reference, with k/v repeated (repeat_interleave) to q's heads."""
    k = k.repeat_interleave(group, dim=-3)
    v = v.repeat_interleave(group, dim=-3)
    L, S = q.size(-2), k.size(-2)
    s = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    bias = torch.zeros(L, S, dtype=q.dtype)
    if causal:
        bias.masked_fill_(torch.ones(L, S, dtype=torch.bool).tril().logical_not(), float("-inf"))
    if mask is not None:
        if mask.dtype == torch.bool:
            bias = bias.masked_fill(mask.logical_not(), float("-inf"))
        else:
            bias = bias + mask
    return torch.softmax(q @ k.transpose(-2, -1) * s + bias, dim=-1) @ v


CASES = [
    # name, (B, Hq, Hkv, S, Sk, D, Dv), mask shape and kind, causal, scale
    ("gqa4_causal", (2, 8, 2, 7, 7, 8, 8), None, None, True, None),
    ("gqa2_bool_scale", (1, 4, 2, 5, 9, 8, 4), (1, 1, 5, 9), "bool", False, 0.3),
    ("gqa4_float_causal", (2, 4, 1, 6, 6, 8, 8), (4, 1, 6), "float", True, None),
    ("s1_float", (1, 2, 2, 1, 1, 4, 3), (1, 1), "float", False, 0.5),
]

def main():
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference", "attention")
    os.makedirs(out_dir, exist_ok=True)
    meta = {}
    for seed, (name, (B, Hq, Hkv, S, Sk, D, Dv), mshape, mkind, causal, scale) in enumerate(CASES):
        g = torch.Generator().manual_seed(seed)
        q = torch.randn(B, Hq, S, D, dtype=torch.float64, generator=g).requires_grad_()
        k = torch.randn(B, Hkv, Sk, D, dtype=torch.float64, generator=g).requires_grad_()
        v = torch.randn(B, Hkv, Sk, Dv, dtype=torch.float64, generator=g).requires_grad_()
        t = {}
        mask = None
        if mkind == "bool":
            mask = torch.rand(mshape, generator=g) > 0.3
            mask[..., 0] = True  # every query row keeps a key (a fully masked row is NaN)
            t["mask"] = mask
        elif mkind == "float":
            mask = torch.randn(mshape, dtype=torch.float64, generator=g).requires_grad_()
        out = sdpa(q, k, v, mask, causal, scale, Hq // Hkv)
        dout = torch.randn(out.shape, dtype=torch.float64, generator=g)
        out.backward(dout)
        t.update({"q": q.detach(), "k": k.detach(), "v": v.detach(), "dout": dout, "out": out.detach(),
                  "dq": q.grad, "dk": k.grad, "dv": v.grad})
        if mkind == "float":
            t["mask"] = mask.detach()
            t["dmask"] = mask.grad
        save_file(t, os.path.join(out_dir, name + ".safetensors"))
        meta[name] = {"causal": causal, "scale": 0.0 if scale is None else scale}
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
