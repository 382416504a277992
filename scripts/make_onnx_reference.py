#!/usr/bin/env python3
"""Exports the ONNX reference models of tests/reference/onnx/ with PyTorch (1.13, /usr/bin/python3).

    /usr/bin/python3 scripts/make_onnx_reference.py [--out tests/reference/onnx]
    /usr/bin/python3 scripts/make_onnx_reference.py --bench-llama OUT.onnx [--layers 24] [--hidden 256]

Writes, per model (gpt: GPT-2 style; llama: RMSNorm, SwiGLU MLP, RoPE, grouped-query attention
with 8 query heads and 2 key/value heads, untied lm_head):
  MODEL.onnx                 torch.onnx.export, opset 17, batch and sequence dims dynamic
  MODEL_io.safetensors       `input_ids` (i64 [2, 8]) and PyTorch's logits for it, `output` (f32)
Models are small (hidden 64) so the files stay small; CI never runs this script. Seeded: the same
torch version writes the same files.

--bench-llama writes only OUT.onnx, a deeper Llama-style model for `dtensor bench import` (not
committed), and prints one JSON line: {"export_seconds": the wall time of torch.onnx.export alone,
"nodes": ..., "bytes": ...}.
"""
import argparse
import math
import os

import torch

from safetensors_writer import save_file
import torch.nn as nn
import torch.nn.functional as F
import json

VOCAB, HIDDEN, LAYERS, MAX_SEQ = 97, 64, 2, 16
BATCH, SEQ = 2, 8


class GptAttention(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(HIDDEN, HIDDEN)
        self.k_proj = nn.Linear(HIDDEN, HIDDEN)
        self.v_proj = nn.Linear(HIDDEN, HIDDEN)
        self.o_proj = nn.Linear(HIDDEN, HIDDEN)
        # GPT-2's causal mask buffer, sliced to the sequence length in forward.
        self.register_buffer("bias", torch.tril(torch.ones(MAX_SEQ, MAX_SEQ, dtype=torch.bool)).view(1, 1, MAX_SEQ, MAX_SEQ))

    def forward(self, x):
        b, s, h = x.shape
        d = h // self.heads
        q = self.q_proj(x).view(b, s, self.heads, d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.heads, d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.heads, d).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
        mask = self.bias[:, :, :s, :s]
        scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.matmul(F.softmax(scores, dim=-1), v)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, h))


class GptBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(HIDDEN)
        self.attn = GptAttention(4)
        self.ln_2 = nn.LayerNorm(HIDDEN)
        self.fc_in = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.fc_out = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.fc_out(F.gelu(self.fc_in(self.ln_2(x))))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, HIDDEN)
        self.wpe = nn.Embedding(MAX_SEQ, HIDDEN)
        self.h = nn.ModuleList([GptBlock() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids):
        pos = torch.arange(input_ids.shape[1], dtype=torch.long).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class RMSNorm(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(HIDDEN))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, heads=8, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, HIDDEN // heads
        self.q_proj = nn.Linear(HIDDEN, heads * self.d, bias=False)
        self.k_proj = nn.Linear(HIDDEN, kv_heads * self.d, bias=False)
        self.v_proj = nn.Linear(HIDDEN, kv_heads * self.d, bias=False)
        self.o_proj = nn.Linear(heads * self.d, HIDDEN, bias=False)

    def forward(self, x, cos, sin, mask):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k = k[:, :, None].expand(b, self.kv_heads, rep, s, self.d).reshape(b, self.heads, s, self.d)
        v = v[:, :, None].expand(b, self.kv_heads, rep, s, self.d).reshape(b, self.heads, s, self.d)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.d) + mask
        out = torch.matmul(F.softmax(scores, dim=-1), v)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, self.heads * self.d))


class LlamaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = RMSNorm()
        self.self_attn = LlamaAttention()
        self.post_attention_layernorm = RMSNorm()
        self.gate_proj = nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.up_proj = nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.down_proj = nn.Linear(3 * HIDDEN, HIDDEN, bias=False)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([LlamaBlock() for _ in range(LAYERS)])
        self.norm = RMSNorm()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        d = HIDDEN // 8
        inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        freqs = torch.outer(torch.arange(MAX_SEQ).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos())
        self.register_buffer("sin_cached", emb.sin())

    def forward(self, input_ids):
        s = input_ids.shape[1]
        cos, sin = self.cos_cached[:s], self.sin_cached[:s]
        # The additive causal mask, built in the graph as exporters see it (Trilu of a full).
        mask = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))

def export(model, name, out_dir):
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), dtype=torch.long)
    model.eval()
    with torch.no_grad():
        # Distinct norm weights: the exporter merges initializers with equal values, and each norm
        # should keep its own parameter (and test its own weight).
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1, 0.1)
                m.bias.normal_(0, 0.1)
        logits = model(ids)
        path = os.path.join(out_dir, name + ".onnx")
        # do_constant_folding=False keeps each nn.Linear's weight under its module path (folding
        # would replace Transpose(weight) with an anonymous pre-transposed copy).
        torch.onnx.export(model, (ids,), path, input_names=["input_ids"], output_names=["logits"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
                          opset_version=17, do_constant_folding=False)
    save_file({"input_ids": ids.contiguous(), "output": logits.contiguous()}, os.path.join(out_dir, name + "_io.safetensors"))
    print("wrote", path, os.path.getsize(path), "bytes")


def bench_llama(path, layers, hidden):
    """Exports a `layers`-deep Llama of width `hidden` and reports how long torch.onnx.export took."""
    global HIDDEN, LAYERS
    HIDDEN, LAYERS = hidden, layers
    torch.manual_seed(0)
    model = Llama().eval()
    ids = torch.zeros((1, MAX_SEQ), dtype=torch.long)
    import time
    with torch.no_grad():
        t0 = time.perf_counter()
        torch.onnx.export(model, (ids,), path, input_names=["input_ids"], output_names=["logits"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
                          opset_version=17, do_constant_folding=False)
        seconds = time.perf_counter() - t0
    print(json.dumps({"export_seconds": seconds, "bytes": os.path.getsize(path), "layers": layers, "hidden": hidden}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "reference", "onnx"))
    ap.add_argument("--bench-llama", metavar="OUT.onnx")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=256)
    args = ap.parse_args()
    if args.bench_llama:
        bench_llama(args.bench_llama, args.layers, args.hidden)
        return
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    export(Gpt(), "gpt", args.out)
    torch.manual_seed(0)
    export(Llama(), "llama", args.out)


if __name__ == "__main__":
    main()
