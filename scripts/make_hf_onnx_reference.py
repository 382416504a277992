#!/usr/bin/env python3
"""Exports small models written the way Hugging Face writes them, with PyTorch 1.13 (/usr/bin/python3,
Debian's python3-torch), for tests/reference/onnx/ (issue 27). CI never runs this script.

    /usr/bin/python3 scripts/make_hf_onnx_reference.py [--out tests/reference/onnx]

Models (hidden 32, 2 layers, vocabulary 61), exported by torch.onnx.export with opset 17 and the
default options (constant folding on, as a user would export), batch and sequence dims dynamic:
  hf_gpt2   GPT-2: Conv1D (addmm) projections with a fused c_attn split into q, k, v; tied wte /
            lm_head; a bool causal-mask buffer `bias` and `where(causal, w, finfo.min)` followed by
            `+ attention_mask`; gelu_new; learned positions wpe.
  hf_llama  Llama: RMSNorm computed in f32 with casts; RoPE from an `inv_freq` buffer (matmul form,
            as transformers >= 4.38); grouped-query attention through repeat_kv (4 query heads,
            2 key/value heads); SwiGLU; softmax(..., dtype=torch.float32).to(q.dtype); an additive
            causal mask with finfo.min.
  hf_qwen2  Qwen2: hf_llama's layers with q/k/v biases, tied embed_tokens / lm_head, and position
            ids expanded to the batch (`arange(s).unsqueeze(0).expand(b, s)`), so the RoPE tables the
            exporter folds hold the batch.
  hf_neox   GPT-NeoX (Pythia): a fused query_key_value laid out head by head ([b, s, heads, 3 d]),
            rotary on the first quarter of each head from cos/sin caches gathered at position ids
            expanded to the batch, a bool causal buffer through where(..., finfo.min), a padding
            mask, parallel residual (x + attention(ln1 x) + mlp(ln2 x)), erf GELU, untied embed_out.
  hf_bert   BERT: word, position (through a `position_ids` buffer) and token-type embeddings,
            padding mask `(1 - mask) * finfo.min`, erf GELU, post-LayerNorm.
  hf_vit    ViT (as transformers' ViTForImageClassification): a Conv2d patch embedding (kernel = stride
            = 4 on 3x16x16 images: 16 patches), a CLS token and learned position embeddings
            (parameters, not modules), pre-LayerNorm blocks, erf GELU MLP, a final LayerNorm and a
            classifier on the CLS position; only the batch dim is dynamic.
  hf_vit_train  hf_vit with a loss output (the one-hot form of hf_llama_train, 10 classes).
  hf_llama_train  hf_llama with a loss output: mean over tokens of -sum(onehot * log_softmax(logits)),
            the targets given as a one-hot f32 input (F.cross_entropy exports
            SoftmaxCrossEntropyLoss).
Beside each MODEL.onnx, MODEL_io.safetensors holds the inputs (batch 2, sequence 8) and PyTorch's
output `output`; hf_llama_train_io.safetensors also holds `losses` [5]: the loss before each of 5
SGD steps (lr 0.1) taken by PyTorch on the parameters (the buffers are not parameters: frozen) and
`inv_freq`, the buffer, to check it is unchanged. hf_vit_train_io.safetensors holds `losses` [5] the
same way and `grad.NAME` for every parameter NAME: PyTorch's gradient of the first loss.
The .onnx files regenerate byte for byte; PyTorch's f32 outputs move in their last bits with the
BLAS kernel and thread count of the machine that runs this (hf_gpt2's by up to 5.7e-6, hf_llama's
and hf_bert's by up to 6e-7, measured against the committed files on 2026-11-27), far inside the
tests' tolerances: regenerate only the models you change (--only).

    --only hf_vit  exports only the named models (comma-separated), leaving the other files as they are.
"""
import argparse
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from safetensors_writer import save_file

VOCAB, HIDDEN, LAYERS, MAX_POS = 61, 32, 2, 32
BATCH, SEQ = 2, 8
LR, STEPS = 0.1, 5


# ---- GPT-2 ----

class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: a linear layer whose weight is [in, out]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.1)
        self.bias = nn.Parameter(torch.randn(nf) * 0.1)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class GPT2Attention(nn.Module):
    def __init__(self, heads=4):
        super().__init__()
        self.heads, self.d = heads, HIDDEN // heads
        self.register_buffer("bias", torch.tril(torch.ones((MAX_POS, MAX_POS), dtype=torch.bool)).view(1, 1, MAX_POS, MAX_POS))
        self.register_buffer("masked_bias", torch.tensor(-1e4))
        self.c_attn = Conv1D(3 * HIDDEN, HIDDEN)
        self.c_proj = Conv1D(HIDDEN, HIDDEN)

    def split_heads(self, x):
        return x.view(x.size()[:-1] + (self.heads, self.d)).permute(0, 2, 1, 3)

    def forward(self, x, attention_mask):
        q, k, v = self.c_attn(x).split(HIDDEN, dim=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        q_len, k_len = q.size(-2), k.size(-2)
        causal = self.bias[:, :, k_len - q_len:k_len, :k_len]
        mask_value = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype, device=w.device)
        w = torch.where(causal, w.to(w.dtype), mask_value)
        w = w + attention_mask
        w = F.softmax(w, dim=-1).type(v.dtype)
        out = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        return self.c_proj(out.view(out.size()[:-2] + (HIDDEN,)))


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(HIDDEN)
        self.attn = GPT2Attention()
        self.ln_2 = nn.LayerNorm(HIDDEN)
        self.c_fc = Conv1D(4 * HIDDEN, HIDDEN)
        self.c_proj = Conv1D(HIDDEN, 4 * HIDDEN)

    def forward(self, x, attention_mask):
        x = x + self.attn(self.ln_1(x), attention_mask)
        return x + self.c_proj(gelu_new(self.c_fc(self.ln_2(x))))


class GPT2(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, HIDDEN)
        self.wpe = nn.Embedding(MAX_POS, HIDDEN)
        self.h = nn.ModuleList([GPT2Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(HIDDEN)

    def forward(self, input_ids, attention_mask):
        s = input_ids.size(-1)
        position_ids = torch.arange(0, s, dtype=torch.long).unsqueeze(0)
        mask = attention_mask[:, None, None, :].to(torch.float32)
        mask = (1.0 - mask) * torch.finfo(torch.float32).min
        x = self.wte(input_ids) + self.wpe(position_ids)
        for block in self.h:
            x = block(x, mask)
        # Tied: lm_head.weight is wte.weight.
        return F.linear(self.ln_f(x), self.wte.weight)


# ---- Llama ----

class LlamaRMSNorm(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(HIDDEN))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        pos = position_ids[:, None, :].float()
        freqs = (inv.float() @ pos.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, rep):
    b, kv, s, d = x.shape
    if rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, kv, rep, s, d).reshape(b, kv * rep, s, d)


class LlamaAttention(nn.Module):
    def __init__(self, heads=4, kv_heads=2, bias=False):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, HIDDEN // heads
        self.q_proj = nn.Linear(HIDDEN, heads * self.d, bias=bias)
        self.k_proj = nn.Linear(HIDDEN, kv_heads * self.d, bias=bias)
        self.v_proj = nn.Linear(HIDDEN, kv_heads * self.d, bias=bias)
        self.o_proj = nn.Linear(heads * self.d, HIDDEN, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(self.d)

    def forward(self, x, position_ids, causal_mask):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        cos, sin = self.rotary_emb(v, position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        k = repeat_kv(k, self.heads // self.kv_heads)
        v = repeat_kv(v, self.heads // self.kv_heads)
        w = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.d)
        w = w + causal_mask
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(w, v).transpose(1, 2).contiguous().reshape(b, s, HIDDEN)
        return self.o_proj(out)


class LlamaMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.up_proj = nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.down_proj = nn.Linear(3 * HIDDEN, HIDDEN, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, attention_bias=False):
        super().__init__()
        self.self_attn = LlamaAttention(bias=attention_bias)
        self.mlp = LlamaMLP()
        self.input_layernorm = LlamaRMSNorm()
        self.post_attention_layernorm = LlamaRMSNorm()

    def forward(self, x, position_ids, causal_mask):
        x = x + self.self_attn(self.input_layernorm(x), position_ids, causal_mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, with_loss=False):
        super().__init__()
        self.with_loss = with_loss
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([LlamaDecoderLayer() for _ in range(LAYERS)])
        self.norm = LlamaRMSNorm()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids, targets=None):
        b, s = input_ids.shape
        position_ids = torch.arange(0, s, dtype=torch.long).unsqueeze(0)
        causal_mask = torch.full((s, s), torch.finfo(torch.float32).min).triu(diagonal=1)[None, None, :, :]
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, position_ids, causal_mask)
        logits = self.lm_head(self.norm(x))
        if not self.with_loss:
            return logits
        return -(targets * F.log_softmax(logits, dim=-1)).sum(-1).mean()


class Qwen2(nn.Module):
    """Llama's layers with q/k/v biases, tied embeddings, and position ids expanded to the batch."""

    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([LlamaDecoderLayer(attention_bias=True) for _ in range(LAYERS)])
        self.norm = LlamaRMSNorm()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.lm_head.weight = self.embed_tokens.weight

    def forward(self, input_ids):
        b, s = input_ids.shape
        position_ids = torch.arange(0, s, dtype=torch.long).unsqueeze(0).expand(b, s)
        causal_mask = torch.full((s, s), torch.finfo(torch.float32).min).triu(diagonal=1)[None, None, :, :]
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, position_ids, causal_mask)
        return self.lm_head(self.norm(x))


# ---- GPT-NeoX ----

class NeoXRotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        freqs = torch.einsum("i,j->ij", torch.arange(MAX_POS).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x, seq_len):
        return self.cos_cached[:seq_len].to(x.dtype), self.sin_cached[:seq_len].to(x.dtype)


class NeoXAttention(nn.Module):
    def __init__(self, heads=4, rotary_pct=0.25):
        super().__init__()
        self.heads, self.d = heads, HIDDEN // heads
        self.rot = int(self.d * rotary_pct)
        self.rotary_emb = NeoXRotaryEmbedding(self.rot)
        self.query_key_value = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.dense = nn.Linear(HIDDEN, HIDDEN)
        causal = torch.tril(torch.ones((MAX_POS, MAX_POS), dtype=torch.bool)).view(1, 1, MAX_POS, MAX_POS)
        self.register_buffer("bias", causal, persistent=False)

    def forward(self, x, attention_mask, position_ids):
        b, s, _ = x.shape
        # q, k and v of a head are neighbours in the fused projection: [b, s, heads, 3 * d].
        qkv = self.query_key_value(x).view(b, s, self.heads, 3 * self.d).permute(0, 2, 1, 3)
        q, k, v = qkv[..., : self.d], qkv[..., self.d: 2 * self.d], qkv[..., 2 * self.d:]
        cos, sin = self.rotary_emb(v, s)
        cos, sin = cos[position_ids].unsqueeze(1), sin[position_ids].unsqueeze(1)
        q_rot, q_pass = q[..., : self.rot], q[..., self.rot:]
        k_rot, k_pass = k[..., : self.rot], k[..., self.rot:]
        q = torch.cat((q_rot * cos + rotate_half(q_rot) * sin, q_pass), dim=-1)
        k = torch.cat((k_rot * cos + rotate_half(k_rot) * sin, k_pass), dim=-1)
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d)
        w = torch.where(self.bias[:, :, :s, :s], w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        w = w + attention_mask
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(v.dtype)
        return self.dense(torch.matmul(w, v).permute(0, 2, 1, 3).reshape(b, s, HIDDEN))


class NeoXMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.dense_4h_to_h = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x):
        return self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(x)))


class NeoXLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(HIDDEN)
        self.post_attention_layernorm = nn.LayerNorm(HIDDEN)
        self.attention = NeoXAttention()
        self.mlp = NeoXMLP()

    def forward(self, x, attention_mask, position_ids):
        # Parallel residual: attention and MLP both read x.
        attn = self.attention(self.input_layernorm(x), attention_mask, position_ids)
        return x + attn + self.mlp(self.post_attention_layernorm(x))


class NeoX(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_in = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([NeoXLayer() for _ in range(LAYERS)])
        self.final_layer_norm = nn.LayerNorm(HIDDEN)
        self.embed_out = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids, attention_mask):
        b, s = input_ids.shape
        position_ids = torch.arange(s, dtype=torch.long).unsqueeze(0).expand(b, s)
        mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * torch.finfo(torch.float32).min
        x = self.embed_in(input_ids)
        for layer in self.layers:
            x = layer(x, mask, position_ids)
        return self.embed_out(self.final_layer_norm(x))


# ---- BERT ----

class BertSelfAttention(nn.Module):
    def __init__(self, heads=4):
        super().__init__()
        self.heads, self.d = heads, HIDDEN // heads
        self.query = nn.Linear(HIDDEN, HIDDEN)
        self.key = nn.Linear(HIDDEN, HIDDEN)
        self.value = nn.Linear(HIDDEN, HIDDEN)

    def t(self, x):
        return x.view(x.size()[:-1] + (self.heads, self.d)).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q, k, v = self.t(self.query(x)), self.t(self.key(x)), self.t(self.value(x))
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d)
        w = w + mask
        p = F.softmax(w, dim=-1)
        out = torch.matmul(p, v).permute(0, 2, 1, 3).contiguous()
        return out.view(out.size()[:-2] + (HIDDEN,))


class BertLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = BertSelfAttention()
        self.attention_output = nn.Linear(HIDDEN, HIDDEN)
        self.attention_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.intermediate = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.output = nn.Linear(4 * HIDDEN, HIDDEN)
        self.output_norm = nn.LayerNorm(HIDDEN, eps=1e-12)

    def forward(self, x, mask):
        x = self.attention_norm(x + self.attention_output(self.attention(x, mask)))
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB, HIDDEN)
        self.position_embeddings = nn.Embedding(MAX_POS, HIDDEN)
        self.token_type_embeddings = nn.Embedding(2, HIDDEN)
        self.embeddings_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(MAX_POS).expand((1, -1)))
        self.layers = nn.ModuleList([BertLayer() for _ in range(LAYERS)])

    def forward(self, input_ids, token_type_ids, attention_mask):
        s = input_ids.size(1)
        pos = self.position_ids[:, :s]
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids) + self.position_embeddings(pos)
        x = self.embeddings_norm(x)
        mask = attention_mask[:, None, None, :].to(torch.float32)
        mask = (1.0 - mask) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, mask)
        return x


# ---- ViT ----

IMAGE, PATCH, CHANNELS, CLASSES = 16, 4, 3, 10
PATCHES = (IMAGE // PATCH) ** 2


class ViTPatchEmbeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.projection = nn.Conv2d(CHANNELS, HIDDEN, kernel_size=PATCH, stride=PATCH)

    def forward(self, pixel_values):
        return self.projection(pixel_values).flatten(2).transpose(1, 2)


class ViTEmbeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.cls_token = nn.Parameter(torch.randn(1, 1, HIDDEN) * 0.5)
        self.patch_embeddings = ViTPatchEmbeddings()
        self.position_embeddings = nn.Parameter(torch.randn(1, PATCHES + 1, HIDDEN) * 0.5)

    def forward(self, pixel_values):
        b = pixel_values.shape[0]
        x = self.patch_embeddings(pixel_values)
        x = torch.cat((self.cls_token.expand(b, -1, -1), x), dim=1)
        return x + self.position_embeddings


class ViTSelfAttention(nn.Module):
    def __init__(self, heads=4):
        super().__init__()
        self.heads, self.d = heads, HIDDEN // heads
        self.query = nn.Linear(HIDDEN, HIDDEN)
        self.key = nn.Linear(HIDDEN, HIDDEN)
        self.value = nn.Linear(HIDDEN, HIDDEN)

    def t(self, x):
        return x.view(x.size()[:-1] + (self.heads, self.d)).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.t(self.query(x)), self.t(self.key(x)), self.t(self.value(x))
        p = F.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d), dim=-1)
        out = torch.matmul(p, v).permute(0, 2, 1, 3).contiguous()
        return out.view(out.size()[:-2] + (HIDDEN,))


class ViTLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layernorm_before = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.attention = ViTSelfAttention()
        self.attention_output = nn.Linear(HIDDEN, HIDDEN)
        self.layernorm_after = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.intermediate = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.output = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x):
        x = x + self.attention_output(self.attention(self.layernorm_before(x)))
        return x + self.output(F.gelu(self.intermediate(self.layernorm_after(x))))


class ViT(nn.Module):
    def __init__(self, with_loss=False):
        super().__init__()
        self.with_loss = with_loss
        self.embeddings = ViTEmbeddings()
        self.layers = nn.ModuleList([ViTLayer() for _ in range(LAYERS)])
        self.layernorm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.classifier = nn.Linear(HIDDEN, CLASSES)

    def forward(self, pixel_values, targets=None):
        x = self.embeddings(pixel_values)
        for layer in self.layers:
            x = layer(x)
        logits = self.classifier(self.layernorm(x)[:, 0, :])
        if not self.with_loss:
            return logits
        return -(targets * F.log_softmax(logits, dim=-1)).sum(-1).mean()


def distinct_norms(model):
    # The exporter merges initializers with equal values: give every norm its own weights.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1, 0.1)
                m.bias.normal_(0, 0.1)


def export(model, name, inputs, out_dir, dynamic, dynamic_dims=("batch", "seq")):
    """inputs: ordered dict name -> tensor; `dynamic` names the inputs whose dims `dynamic_dims` (from
    dim 0) are dynamic. Writes NAME.onnx and returns the tensors for NAME_io.safetensors."""
    model.eval()
    distinct_norms(model)
    path = os.path.join(out_dir, name + ".onnx")
    with torch.no_grad():
        out = model(*inputs.values())
        torch.onnx.export(model, tuple(inputs.values()), path, input_names=list(inputs), output_names=["output"],
                          dynamic_axes={k: dict(enumerate(dynamic_dims)) for k in dynamic}, opset_version=17)
    tensors = dict(inputs)
    tensors["output"] = out.contiguous()
    print("wrote", path, os.path.getsize(path), "bytes")
    return tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "reference", "onnx"))
    ap.add_argument("--only", default="", help="comma-separated models to export (default: all)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    wanted = lambda name: not only or name in only
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    pad = torch.ones((BATCH, SEQ), dtype=torch.long)
    pad[1, SEQ - 3:] = 0  # the second sequence is padded

    types = torch.zeros((BATCH, SEQ), dtype=torch.long)
    types[:, SEQ // 2:] = 1
    # Forward-only models: name -> (class, inputs), each built from seed 0.
    forward_models = {
        "hf_gpt2": (GPT2, {"input_ids": ids, "attention_mask": pad}),
        "hf_llama": (Llama, {"input_ids": ids}),
        "hf_bert": (Bert, {"input_ids": ids, "token_type_ids": types, "attention_mask": pad}),
        "hf_qwen2": (Qwen2, {"input_ids": ids}),
        "hf_neox": (NeoX, {"input_ids": ids, "attention_mask": pad}),
    }
    for name, (cls, inputs) in forward_models.items():
        if wanted(name):
            torch.manual_seed(0)
            t = export(cls(), name, inputs, args.out, list(inputs))
            save_file(t, os.path.join(args.out, name + "_io.safetensors"))

    # Training: the same Llama (seed 0) with a loss; 5 SGD steps in f32 on its parameters only.
    targets = F.one_hot(torch.randint(0, VOCAB, (BATCH, SEQ), generator=g), VOCAB).float()
    if wanted("hf_llama_train"):
        torch.manual_seed(0)
        model = Llama(with_loss=True)
        t = export(model, "hf_llama_train", {"input_ids": ids, "targets": targets}, args.out, [])
        inv_freq = model.layers[0].self_attn.rotary_emb.inv_freq.clone()
        losses, _ = sgd_losses(model, (ids, targets))
        assert torch.equal(inv_freq, model.layers[0].self_attn.rotary_emb.inv_freq)
        t["losses"] = torch.tensor(losses, dtype=torch.float64)
        save_file(t, os.path.join(args.out, "hf_llama_train_io.safetensors"))
        print("losses", losses)

    # ViT: its own images and labels; the batch dim dynamic (the CLS token is expanded to it).
    gv = torch.Generator().manual_seed(11)
    pixels = torch.randn((BATCH, CHANNELS, IMAGE, IMAGE), generator=gv)
    labels = F.one_hot(torch.randint(0, CLASSES, (BATCH,), generator=gv), CLASSES).float()
    if wanted("hf_vit"):
        torch.manual_seed(0)
        t = export(ViT(), "hf_vit", {"pixel_values": pixels}, args.out, ["pixel_values"], ("batch",))
        save_file(t, os.path.join(args.out, "hf_vit_io.safetensors"))
    if wanted("hf_vit_train"):
        torch.manual_seed(0)
        model = ViT(with_loss=True)
        t = export(model, "hf_vit_train", {"pixel_values": pixels, "targets": labels}, args.out,
                   ["pixel_values", "targets"], ("batch",))
        losses, grads = sgd_losses(model, (pixels, labels))
        t["losses"] = torch.tensor(losses, dtype=torch.float64)
        t.update({"grad." + name: g0 for name, g0 in grads.items()})
        save_file(t, os.path.join(args.out, "hf_vit_train_io.safetensors"))
        print("losses", losses)


def sgd_losses(model, inputs):
    """Takes STEPS SGD steps (lr LR) on the model's parameters; returns the loss before each and the
    gradients of the first, by parameter name."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses, grads = [], {}
    for step in range(STEPS):
        opt.zero_grad()
        loss = model(*inputs)
        loss.backward()
        if step == 0:
            grads = {name: p.grad.detach().clone().contiguous() for name, p in model.named_parameters()}
        opt.step()
        losses.append(loss.item())
    return losses, grads

if __name__ == "__main__":
    main()
