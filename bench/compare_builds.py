#!/usr/bin/env python3
"""Did anything get slower? Runs `dtensor bench NAME --json` with two builds of dtensor, alternating
old and new in each round, and prints per benchmark the new/old ratio of every time figure it
reports (median, min, max, and the figures furthest above 1) and which of its other numeric figures
(bytes, counts, ratios) changed.

    bench/compare_builds.py OLD/dtensor NEW/dtensor [--benches parse,plan] [--rounds 2]
        [--args 'model=--rounds 1'] [--json out.json]

A time figure is a number whose key ends in _ms, _us, _ns, _s or _seconds or reads "ms per ..." or
"us per ..."; a ratio below 1 means
the new build is faster. With several rounds, each build's fastest value of a figure is kept (the
benchmarks already report their own best of several runs; rounds guard against a noisy neighbour).
Benchmarks only one build has are skipped and named. Installs nothing and never runs in CI (it
needs a second build); state the machine's load with its output.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys

TIME_SUFFIXES = ("_ms", "_us", "_ns", "_s", "_seconds")


def bench_names(binary):
    out = subprocess.run([binary, "bench", "--help"], capture_output=True, text=True, check=True).stdout
    names, in_subcommands = [], False
    for line in out.splitlines():
        if line.startswith("Subcommands:"):
            in_subcommands = True
        elif in_subcommands and line.startswith("  ") and line.strip():
            names.append(line.split()[0])
    return [n for n in names if n != "collectives-mpi"]  # needs mpirun


def flatten(value, path, out):
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(v, f"{path}.{k}" if path else k, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            flatten(v, f"{path}[{i}]", out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[path] = float(value)


def run(binary, name, extra):
    proc = subprocess.run([binary, "bench", name, "--json", *extra], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{binary} bench {name} failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    start = proc.stdout.find("{")
    if start < 0:
        raise RuntimeError(f"{binary} bench {name} --json printed no JSON object")
    figures = {}
    flatten(json.JSONDecoder().raw_decode(proc.stdout[start:])[0], "", figures)
    return figures


def is_time(key):
    leaf = key.rsplit(".", 1)[-1].split("[")[0]
    return leaf.endswith(TIME_SUFFIXES) or leaf.startswith(("ms_per", "us_per")) or "_ms_per" in leaf or "_us_per" in leaf


def compare(old_runs, new_runs):
    best = lambda runs, k: min(r[k] for r in runs if k in r)
    keys = sorted(set(old_runs[0]) & set(new_runs[0]))
    ratios, changed = {}, []
    for k in keys:
        o, n = best(old_runs, k), best(new_runs, k)
        if is_time(k):
            if o > 0 and n > 0:
                ratios[k] = n / o
        elif o != n:
            changed.append(k)
    only = sorted(set(old_runs[0]) ^ set(new_runs[0]))
    return ratios, changed, only


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--benches", help="comma-separated benchmark names (default: every one both builds have)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--args", action="append", default=[], help="NAME=ARGS: extra arguments for one benchmark")
    ap.add_argument("--json", help="write every figure and ratio to this file")
    a = ap.parse_args()
    for b in (a.old, a.new):
        if not os.access(b, os.X_OK):
            sys.exit(f"compare_builds: {b} is not an executable dtensor")
    old_names, new_names = bench_names(a.old), bench_names(a.new)
    names = a.benches.split(",") if a.benches else [n for n in new_names if n in old_names]
    skipped = [n for n in new_names if n not in old_names]
    extra = {}
    for spec in a.args:
        name, _, rest = spec.partition("=")
        extra[name] = shlex.split(rest)  # quoted words stay whole: --fsdp "" is an empty value
    report = {}
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for name in names:
        old_runs, new_runs = [], []
        for _ in range(a.rounds):
            for binary, runs in ((a.old, old_runs), (a.new, new_runs)):
                runs.append(run(binary, name, extra.get(name, [])))
        ratios, changed, only = compare(old_runs, new_runs)
        values = sorted(ratios.values())
        worst = sorted(ratios.items(), key=lambda kv: -kv[1])[:3]
        if values:
            line = (f"{name}: {len(values)} time figures, new/old median {statistics.median(values):.3f} "
                    f"(min {values[0]:.2f}, max {values[-1]:.2f}; highest: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in worst) + ")")
        else:
            line = f"{name}: no time figure in common"
        line += f"; {len(changed)} other figures differ" + (f" (e.g. {', '.join(changed[:4])})" if changed else "")
        if only:
            line += f"; {len(only)} figures in one build only"
        print(line, flush=True)
        report[name] = {"ratios": ratios, "changed": changed, "only_in_one": only, "old": old_runs, "new": new_runs}
    if skipped:
        print("only in the new build (not compared): " + ", ".join(skipped))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            json.dump(report, f, indent=1)
        os.replace(a.json + ".tmp", a.json)


if __name__ == "__main__":
    main()
