#!/usr/bin/env python3
"""The HF-style exports of make_hf_onnx_reference.py at sequence 128, for the tp / fsdp x tp runs of
issue 27 (tests/onnx/onnx_import_hf_test.cc, HfSharding.*). CI never runs this script.

    /usr/bin/python3 scripts/make_hf_onnx_seq128_reference.py [--out tests/reference/onnx]

The same models (hidden 32, 2 layers, vocabulary 61, the same seeds) with 128 positions (GPT-2's
wpe and causal-mask buffer, BERT's position embeddings; the Llama has no position table and is the
same model as hf_llama), exported the same way (opset 17, default options, dynamic batch and
sequence). Writes MODEL_s128.onnx and MODEL_s128_io.safetensors (inputs at batch 2, sequence 128,
the second sequence padded by 40 tokens for GPT-2 and BERT, and PyTorch's `output`).
"""
import argparse
import os

import torch

import make_hf_onnx_reference as ref
from safetensors_writer import save_file

SEQ = 128


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "reference", "onnx"))
    args = ap.parse_args()
    ref.MAX_POS = SEQ  # read by the modules' constructors
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, ref.VOCAB, (ref.BATCH, SEQ), generator=g)
    pad = torch.ones((ref.BATCH, SEQ), dtype=torch.long)
    pad[1, SEQ - 40:] = 0
    types = torch.zeros((ref.BATCH, SEQ), dtype=torch.long)
    types[:, SEQ // 2:] = 1
    cases = [
        ("hf_gpt2_s128", ref.GPT2, {"input_ids": ids, "attention_mask": pad}),
        ("hf_llama_s128", ref.Llama, {"input_ids": ids}),
        ("hf_bert_s128", ref.Bert, {"input_ids": ids, "token_type_ids": types, "attention_mask": pad}),
    ]
    for name, cls, inputs in cases:
        torch.manual_seed(0)
        t = ref.export(cls(), name, inputs, args.out, list(inputs))
        save_file(t, os.path.join(args.out, name + "_io.safetensors"))


if __name__ == "__main__":
    main()
