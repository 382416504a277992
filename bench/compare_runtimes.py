#!/usr/bin/env python3
"""dtensor against ONNX Runtime on the same ONNX export, on this host (issue 33; never in CI).

    python3 bench/compare_runtimes.py MODEL.onnx --input-shape input_ids=4x256 --vocab V [--threads 1,2]
        [--rounds 3] [--runs 5] [--dtensor build/dtensor] [--ort-dir DIR]

Installs nothing. ONNX Runtime is used when `require("onnxruntime-node")` works from --ort-dir
(a directory where `npm install onnxruntime-node --onnxruntime-node-install=skip` was run) and
`node` is on PATH; otherwise the script says so and times dtensor alone. Per thread count the two
runtimes alternate for --rounds rounds (ORT, then dtensor, then ORT ...), each round the fastest of
--runs runs after a warm-up (dtensor: `run --repeat`; ORT: bench/ort_time.js, all graph
optimisations, intra-op threads = the count); the median round is reported with the ratio
ORT time / dtensor time (> 1: dtensor is faster) and the largest absolute difference between the
two runtimes' first outputs. Integer inputs are random token ids below --vocab (fixed --seed).
A model to try: `/usr/bin/python3 scripts/make_onnx_reference.py --bench-llama llama.onnx
--layers 4 --hidden 512` (PyTorch exports it). State the machine's load with the figures.
"""
import argparse
import json
import os
import pathlib
import statistics
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def write_safetensors(tensors, path):
    header, blobs, at = {}, [], 0
    for name, a in sorted(tensors.items()):
        blob = np.ascontiguousarray(a).tobytes()
        dt = {np.dtype(np.int64): "I64", np.dtype(np.float32): "F32"}[a.dtype]
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        dtype = {"F32": np.float32, "I64": np.int64}[h["dtype"]]
        out[name] = np.frombuffer(data[a:b], dtype=dtype).reshape(h["shape"])
    return out


def ort_available(ort_dir):
    if not ort_dir:
        return False
    try:
        subprocess.run(["node", "-e", "require('onnxruntime-node')"], cwd=ort_dir, check=True,
                       capture_output=True, timeout=60)
        return True
    except (OSError, subprocess.SubprocessError):
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--input-shape", action="append", required=True, help="NAME=AxB (integer token ids)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--vocab", type=int, required=True, help="token ids are drawn below this")
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--dtensor", default=str(ROOT / "build" / "dtensor"))
    ap.add_argument("--ort-dir", default=os.environ.get("ORT_DIR", ""))
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="dtensor-compare-"))
    shapes = {}
    for spec in args.input_shape:
        name, dims = spec.split("=")
        shapes[name] = [int(d) for d in dims.split("x")]
    inputs = {n: rng.integers(0, args.vocab, size=s, dtype=np.int64) for n, s in shapes.items()}
    write_safetensors(inputs, tmp / "in.safetensors")
    ort_inputs = []
    for n, a in inputs.items():
        a.tofile(tmp / f"{n}.bin")
        ort_inputs.append({"name": n, "dtype": "int64", "shape": list(a.shape), "file": str(tmp / f"{n}.bin")})
    (tmp / "inputs.json").write_text(json.dumps(ort_inputs))

    imp = [args.dtensor, "import", args.model, "-o", str(tmp / "m.dt"), "--weights", str(tmp / "w.safetensors")]
    for n, s in shapes.items():
        imp += ["--input-shape", f"{n}={'x'.join(map(str, s))}"]
    subprocess.run(imp, check=True, capture_output=True, text=True)
    have_ort = ort_available(args.ort_dir)
    # bench/ort_time.js lives here, the package in --ort-dir: node finds it through NODE_PATH.
    node_env = dict(os.environ, NODE_PATH=str(pathlib.Path(args.ort_dir or ".").resolve() / "node_modules"))
    if not have_ort:
        print("onnxruntime-node not found (give --ort-dir or ORT_DIR): timing dtensor alone", file=sys.stderr)

    def time_dtensor(threads):
        r = subprocess.run([args.dtensor, "run", str(tmp / "m.dt"), "--weights", str(tmp / "w.safetensors"),
                            "--inputs", str(tmp / "in.safetensors"), "--repeat", str(args.runs), "--threads",
                            str(threads), "--json", "--save-outputs", str(tmp / "dt_out.safetensors")],
                           check=True, capture_output=True, text=True)
        return json.loads(r.stdout)["time_ms"]

    def time_ort(threads):
        r = subprocess.run(["node", str(ROOT / "bench" / "ort_time.js"), os.path.abspath(args.model),
                            str(tmp / "inputs.json"), str(threads), str(args.runs), str(tmp / "ort_out.bin")],
                           env=node_env, check=True, capture_output=True, text=True)
        return min(json.loads(r.stdout)["ms"])

    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        ours, theirs = [], []
        for _ in range(args.rounds):
            if have_ort:
                theirs.append(time_ort(threads))
            ours.append(time_dtensor(threads))
        row = {"threads": threads, "dtensor_ms": statistics.median(ours), "rounds": args.rounds, "runs": args.runs}
        if have_ort:
            row["ort_ms"] = statistics.median(theirs)
            row["ort_over_dtensor"] = row["ort_ms"] / row["dtensor_ms"]
            ours_out = next(iter(read_safetensors(tmp / "dt_out.safetensors").values()))
            ort_out = np.fromfile(tmp / "ort_out.bin", dtype=np.float32).reshape(ours_out.shape)
            row["max_abs_diff"] = float(np.max(np.abs(ours_out - ort_out)))
        rows.append(row)
    load = os.getloadavg()
    print(json.dumps({"model": args.model, "inputs": shapes, "load_average": load, "results": rows}, indent=2))


if __name__ == "__main__":
    try:
        main()
    except subprocess.CalledProcessError as e:
        sys.exit(f"compare_runtimes: {' '.join(map(str, e.cmd[:2]))} failed: {(e.stderr or '').strip()}")
