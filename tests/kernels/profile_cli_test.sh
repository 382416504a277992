#!/usr/bin/env bash
# `dtensor profile`: the JSON report's structure (not its times) on a small gpt, the text report,
# and its user errors (exit 2, one line).
# Usage: profile_cli_test.sh path/to/dtensor
set -u
DT="$1"
source "$(dirname "$0")/../cli_test_lib.sh"

"$DT" example gpt --hidden 128 --heads 4 --layers 2 --batch 2 --seq 32 -o "$t/m.dt" --weights "$t/w.safetensors" \
  --inputs "$t/in.safetensors" 2>/dev/null || FAIL "example"

timeout 300 "$DT" profile "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --repeat 2 --threads 2 \
  --json > "$t/p.json" || FAIL "profile --json"
python3 - "$t/p.json" <<'PY' || FAIL "profile JSON structure"
import json, sys
j = json.load(open(sys.argv[1]))
for key in ("model", "threads", "repeat", "time_ms", "peak_bytes", "op_kinds", "top_nodes", "matmuls", "overall"):
    assert key in j, key
assert j["threads"] == 2 and j["repeat"] == 2 and j["time_ms"] > 0 and j["peak_bytes"] > 0
kinds = {k["op"]: k for k in j["op_kinds"]}
# 2 layers x 6 linears + lm_head; 2 attention nodes
assert kinds["linear"]["nodes"] == 13 and kinds["scaled_dot_product_attention"]["nodes"] == 2, kinds
assert abs(sum(k["percent"] for k in j["op_kinds"]) - 100) < 25  # node times fill most of the run
assert 1 <= len(j["top_nodes"]) <= 20
ms = [n["ms"] for n in j["top_nodes"]]
assert ms == sorted(ms, reverse=True)
lin = [m for m in j["matmuls"] if m["op"] == "linear"]
assert len(lin) == 13
for m in lin:
    # [2*32 tokens, 128] x [128, out]
    assert m["m"] == 64 and m["k"] in (128, 512) and m["batch"] == 1, m
    assert abs(m["gflop"] - 2 * m["m"] * m["k"] * m["n"] / 1e9) < 1e-12
    assert m["gflops"] > 0 and m["gemm_gflops"] > 0 and m["ratio"] > 0
att = [m for m in j["matmuls"] if m["op"] == "scaled_dot_product_attention"]
# causal: 2 batch x 4 heads x (32*33/2 pairs) x 2 x (32 + 32)
assert len(att) == 2 and abs(att[0]["gflop"] - 2 * 4 * 528 * 2 * 64 / 1e9) < 1e-12 and att[0]["gemm_gflops"] is None
o = j["overall"]
assert abs(o["matmul_gflop"] - sum(m["gflop"] for m in lin)) < 1e-9
assert o["gflops"] > 0 and o["gemm_gflops"] > 0 and 0 < o["ratio"]
PY

out=$(timeout 300 "$DT" profile "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --repeat 1 2>&1) ||
  FAIL "profile (text)"
for text in "op kind" "top nodes" "matmul-like node" "overall:" "peak memory"; do
  echo "$out" | grep -qF "$text" || FAIL "'$text' not in the text report"
done

expect_error() {  # expect_error <text> <args...>: exit 2, one line containing <text>
  local text="$1"
  shift
  local out status
  out=$(timeout 120 "$DT" "$@" 2>&1)
  status=$?
  [ "$status" -eq 2 ] || FAIL "exit $status (want 2): dtensor $*: $(echo "$out" | tail -3)"
  echo "$out" | grep -qF -- "$text" || FAIL "'$text' not in output of dtensor $*: $out"
  [ "$(echo "$out" | wc -l)" -eq 1 ] || FAIL "more than one line: dtensor $*: $out"
}
expect_error "profile --mesh/--plan is not implemented yet" profile "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --mesh 2 --plan x.json
expect_error "--repeat must be >= 1, got 0" profile "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --repeat 0
expect_error "pass --weights" profile "$t/m.dt" --inputs "$t/in.safetensors"

finish
