#!/usr/bin/env python3
"""Whose rounding is it? dtensor's and ONNX Runtime's logits against PyTorch in float64 (issue 33;
never in CI). Builds scripts/make_hf_onnx_reference.py's GPT-2 or Llama at the benchmark size
(vocab 4096, hidden 512, 4 layers, batch 4 x seq 256), exports it in f32 (opset 17), runs the
export in dtensor (--threads 1) and, when onnxruntime-node is found in --ort-dir, in ONNX Runtime
(bench/ort_time.js), and the same module in PyTorch in f32 and in f64 (.double()), and prints each
f32 runtime's error against f64: max and rms absolute, and max relative to the logits' largest
magnitude.

    /usr/bin/python3 bench/compare_f64.py --model gpt2 [--dtensor build/dtensor] [--ort-dir DIR]

Measured: the GPT-2-style logits reach |122| (tied wte ~ N(0, 1), 512-wide dots), so every f32
runtime is ~5e-4 off f64: dtensor 6.0e-4 max / 5.9e-5 rms, ORT 5.3e-4 / 6.0e-5, PyTorch f32
4.9e-4 / 5.2e-5 (4-5e-6 of the largest logit); dtensor and ORT differ by 4.5e-4, neither the
worse. The Llama's logits stay below |3|: dtensor 2.2e-6 / 1.9e-7, ORT 2.1e-6 / 1.9e-7.
"""
import argparse
import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "bench"))
import compare_runtimes as cr  # noqa: E402
import make_hf_onnx_reference as ref  # noqa: E402


def build(model):
    ref.VOCAB, ref.HIDDEN, ref.LAYERS, ref.MAX_POS = 4096, 512, 4, 256
    torch.manual_seed(0)
    if model == "gpt2":
        class Plain(ref.GPT2):  # an all-ones attention mask, as a one-input forward
            def forward(self, input_ids):
                return super().forward(input_ids, torch.ones_like(input_ids))
        m = Plain()
    else:
        m = ref.Llama()
    m.eval()
    ref.distinct_norms(m)
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--dtensor", default=str(ROOT / "build" / "dtensor"))
    ap.add_argument("--ort-dir", default=os.environ.get("ORT_DIR", ""))
    ap.add_argument("--seed", type=int, default=33)
    args = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="dtensor-f64-"))
    m = build(args.model)
    ids = np.random.default_rng(args.seed).integers(0, 4096, size=(4, 256), dtype=np.int64)
    t = torch.from_numpy(ids)
    with contextlib.redirect_stdout(sys.stderr):  # stdout is the JSON
        ref.export(m, args.model, {"input_ids": t}, str(tmp), ["input_ids"])
    onnx_path = tmp / f"{args.model}.onnx"
    cr.write_safetensors({"input_ids": ids}, tmp / "in.safetensors")
    subprocess.run([args.dtensor, "import", str(onnx_path), "-o", str(tmp / "m.dt"), "--weights",
                    str(tmp / "w.safetensors"), "--input-shape", "input_ids=4x256"], check=True, capture_output=True)
    subprocess.run([args.dtensor, "run", str(tmp / "m.dt"), "--weights", str(tmp / "w.safetensors"), "--inputs",
                    str(tmp / "in.safetensors"), "--threads", "1", "--save-outputs", str(tmp / "dt.safetensors")],
                   check=True, capture_output=True)
    outs = {"dtensor": next(iter(cr.read_safetensors(tmp / "dt.safetensors").values())).astype(np.float64)}
    if cr.ort_available(args.ort_dir):
        ids.tofile(tmp / "input_ids.bin")
        (tmp / "inputs.json").write_text(json.dumps([{"name": "input_ids", "dtype": "int64", "shape": [4, 256],
                                                      "file": str(tmp / "input_ids.bin")}]))
        env = dict(os.environ, NODE_PATH=str(pathlib.Path(args.ort_dir).resolve() / "node_modules"))
        subprocess.run(["node", str(ROOT / "bench" / "ort_time.js"), str(onnx_path), str(tmp / "inputs.json"), "1", "1",
                        str(tmp / "ort.bin")], env=env, check=True, capture_output=True)
        outs["onnxruntime"] = np.fromfile(tmp / "ort.bin", dtype=np.float32).reshape(outs["dtensor"].shape).astype(np.float64)
    else:
        print("onnxruntime-node not found (give --ort-dir or ORT_DIR): dtensor and PyTorch only", file=sys.stderr)
    with torch.no_grad():
        outs["torch f32"] = m(t).numpy().astype(np.float64)
        f64 = m.double()(t).numpy()
    top = float(np.abs(f64).max())
    rows = {"logits_max_abs": top, "logits_rms": float(np.sqrt((f64 ** 2).mean()))}
    for name, a in outs.items():
        d = np.abs(a - f64)
        rows[name] = {"max_abs_vs_f64": float(d.max()), "rms_vs_f64": float(np.sqrt((d ** 2).mean())),
                      "max_rel_to_logits_max": float(d.max()) / top}
    if "onnxruntime" in outs:
        rows["dtensor_vs_onnxruntime_max_abs"] = float(np.abs(outs["dtensor"] - outs["onnxruntime"]).max())
    shutil.rmtree(tmp)
    print(json.dumps({"model": args.model, **rows}, indent=2))


if __name__ == "__main__":
    main()
