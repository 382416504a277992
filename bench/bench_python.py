#!/usr/bin/env python3
"""The Python module's overhead (not in CI; run after `make build`):

    PYTHONPATH=build/python python3 bench/bench_python.py [--calls 2000]

1. Per-call overhead of `m.run` on the tiny mlp (examples/mlp.dt, one device): the time of a
   Python call minus the time of the same library call made from C++ (Model._time_library_runs),
   both the fastest of several rounds. The goal is at most 20 us.
2. Bytes copied for a 64 MiB input and a 64 MiB output (a model `y = relu(x)` on f32[16Mi]): the
   binding's own count (dt._dtensor._bytes_copied), and whether the output array views the
   library's buffer. The goal is 0 bytes.
Prints one JSON object.
"""
import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

import dtensor as dt

ROOT = pathlib.Path(__file__).resolve().parents[1]


def overhead(calls: int, rounds: int = 5) -> dict:
    ref = ROOT / "tests" / "reference" / "mlp"
    m = dt.load(ROOT / "examples" / "mlp.dt", weights=ref / "weights.safetensors")
    x = {k: v for k, v in dt.load_safetensors(ref / "inputs.safetensors").items() if k in m.inputs}
    m.run(x)  # warm up
    py_best = lib_best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            m.run(x)
        py_best = min(py_best, (time.perf_counter() - t0) / calls)
        lib_best = min(lib_best, m._impl._time_library_runs(x, calls) / calls)
    return {"calls": calls, "python_us_per_call": py_best * 1e6, "library_us_per_call": lib_best * 1e6,
            "overhead_us_per_call": (py_best - lib_best) * 1e6}


def copies() -> dict:
    n = 16 * 1024 * 1024  # 64 MiB of f32
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "relu.dt"
        path.write_text(f"graph relu {{\n  input %x : f32[{n}]\n  %y = relu(%x) : f32[{n}]\n  return %y\n}}\n")
        m = dt.load(path)
        x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
        before = dt._dtensor._bytes_copied()
        out = m.run({"x": x})["y"]
        copied = dt._dtensor._bytes_copied() - before
    return {"input_bytes": x.nbytes, "output_bytes": out.nbytes, "bytes_copied": copied,
            "output_owns_its_data": bool(out.flags["OWNDATA"]), "output_views_library_buffer": out.base is not None,
            "correct": bool(np.array_equal(out, np.maximum(x, 0)))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    print(json.dumps({"run_overhead": overhead(args.calls), "copies_64mib": copies()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
