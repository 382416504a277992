#!/usr/bin/env bash
# `dtensor bench pipeline`: the JSON report's structure and its exact figures (the bubble theory,
# gpipe, 1f1b and interleaved-1f1b with v = 2,
# the activations each stage holds, the bytes crossing stage boundaries), never its times, on tiny
# micro-batches; the text table; the user errors (exit 2, one line).
# Usage: bench_pipeline_cli_test.sh path/to/dtensor
set -u
DT="$1"
source "$(dirname "$0")/../cli_test_lib.sh"

tiny=(--rows 4 --width 8 --repeat 1)
timeout 300 "$DT" bench pipeline "${tiny[@]}" --json > "$t/p.json" || FAIL "bench pipeline --json"
python3 - "$t/p.json" <<'PY' || FAIL "bench pipeline JSON"
import json, sys
j = json.load(open(sys.argv[1]))
c = j["config"]
assert (c["rows"], c["width"], c["repeat"], c["backend"]) == (4, 8, 1, "threads") and c["cores"] >= 1, c
act = 4 * 8 * 4
runs = j["runs"]
assert [(r["schedule"], r["stages"], r["virtual_stages"], r["microbatches"]) for r in runs] == [
    (s, p, 2 if s == "interleaved-1f1b" else 1, m)
    for s in ("gpipe", "1f1b", "interleaved-1f1b") for p in (2, 4) for m in (1, 2, 4, 8)], runs

def interleaved_held(p, s, m, v):
    # PyTorch's ScheduleInterleaved1F1B order of rank s: the most chunk forwards awaiting backward.
    per_round = m // max(1, m // p)
    warmup = min((v - 1) * per_round + 2 * (p - 1 - s), m * v)
    live = most = 0
    for op in range(m * v + warmup):
        if op < m * v:
            live += 1
            most = max(most, live)
        if op >= warmup:
            live -= 1
    return most

for r in runs:
    s, p, v, m = r["schedule"], r["stages"], r["virtual_stages"], r["microbatches"]
    assert abs(r["bubble_theory"] - (p - 1) / (v * m + p - 1)) < 1e-12, r
    if s == "gpipe":
        held = [m] * p
    elif s == "1f1b":
        held = [min(m, p - st) for st in range(p)]
    else:
        held = [interleaved_held(p, st, m, v) for st in range(p)]
    assert r["activations_held_per_stage"] == held, r
    assert r["peak_activation_bytes_per_stage"] == [h * act for h in held], r
    assert r["activation_bytes"] == act
    assert r["boundary_bytes_per_step"] == r["boundary_bytes_theory"] == 2 * m * (p * v - 1) * act, r
    assert len(r["bubble_measured_per_stage"]) == p and all(0 <= b <= 1 for b in r["bubble_measured_per_stage"]), r
    assert 0 <= r["bubble_measured"] <= 1 and r["makespan_ms"] > 0 and r["microbatch_compute_ms"] > 0, r
    assert "overhead_ms_per_microbatch" in r
PY
"$DT" bench pipeline "${tiny[@]}" > "$t/p.txt" || FAIL "bench pipeline"
grep -qE "^1f1b +4 +1 +8 +[0-9.]+ +0\.273 .* 4,3,2,1 +512 +6144$" "$t/p.txt" || FAIL "the table's 1f1b p 4 m 8 row: $(cat "$t/p.txt")"
grep -qE "^interleaved-1f1b +2 +2 +4 +[0-9.]+ +0\.111 .* 5,3 +640 +3072$" "$t/p.txt" ||
  FAIL "the table's interleaved p 2 v 2 m 4 row: $(cat "$t/p.txt")"

expect_error "--rows: Value 0 not in range 1 to 65536" bench pipeline --rows 0
expect_error "--repeat: Value 0 not in range 1 to 1000" bench pipeline --repeat 0
finish
