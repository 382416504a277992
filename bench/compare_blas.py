#!/usr/bin/env python3
"""OpenBLAS's sgemm against the other BLAS libraries installed on this host (issue 33; never in CI).

    python3 bench/compare_blas.py [--rounds 2] [--runs 30]

Installs nothing. Builds bench/blas_sgemm.cc (the Llama export's linear shapes, M = 1024, one
thread) into a temporary directory against each library found: OpenBLAS as dtensor loads it
(OPENBLAS_CORETYPE=Haswell on AMD family 0x19, core/blas_kernels.h) and with OpenBLAS's own
choice, and BLIS (Debian `libblis-pthread-dev`) when present; runs them alternately for --rounds
rounds and prints each shape's best GFLOP/s and the ratio to OpenBLAS as dtensor runs it.
dtensor's own packed-weight kernel on the same shapes: `build/kernels_bench
--benchmark_filter=BM_LinearShapes`. State the machine's load with the figures.
"""
import argparse
import os
import pathlib
import re
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIB = pathlib.Path("/usr/lib/x86_64-linux-gnu")
CANDIDATES = [  # (name, library directory, -l name, extra environment)
    ("openblas-haswell", LIB / "openblas-pthread", "openblas", {"OPENBLAS_CORETYPE": "Haswell"}),
    ("openblas-own", LIB / "openblas-pthread", "openblas", {}),
    ("blis", LIB / "blis-pthread", "blis", {}),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    env1 = dict(os.environ, OPENBLAS_NUM_THREADS="1", BLIS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    found, best = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, libdir, lib, env in CANDIDATES:
            if not libdir.is_dir():
                print(f"{name}: {libdir} not installed, skipped")
                continue
            exe = pathlib.Path(tmp) / f"sgemm_{lib}"
            if not exe.exists():
                subprocess.run(["g++", "-O2", str(ROOT / "bench" / "blas_sgemm.cc"), "-o", str(exe), f"-L{libdir}",
                                f"-l{lib}", f"-Wl,-rpath,{libdir}"], check=True)
            found.append((name, exe, env))
        for _ in range(args.rounds):
            for name, exe, env in found:
                out = subprocess.run([str(exe), str(args.runs)], env=dict(env1, **env), check=True,
                                     capture_output=True, text=True).stdout
                for line in out.splitlines():
                    m = re.match(r"N\s+(\d+) K\s+(\d+): ([\d.]+) GFLOP/s", line)
                    key = (name, int(m[1]), int(m[2]))
                    best[key] = max(best.get(key, 0.0), float(m[3]))
    shapes = sorted({(n, k) for _, n, k in best}, key=lambda s: (s[1], s[0]))
    names = [f[0] for f in found]
    print("GFLOP/s, one thread, M = 1024 (best of all rounds); ratio to openblas-haswell")
    print("N x K".ljust(12) + "".join(n.rjust(22) for n in names))
    for n, k in shapes:
        ref = best.get(("openblas-haswell", n, k))
        cells = []
        for name in names:
            v = best[(name, n, k)]
            cells.append((f"{v:.1f} ({v / ref:.3f})" if ref else f"{v:.1f}").rjust(22))
        print(f"{n}x{k}".ljust(12) + "".join(cells))


if __name__ == "__main__":
    main()
