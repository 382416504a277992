#!/usr/bin/env bash
# `dtensor profile`: the JSON report's structure (not its times) on a small gpt, fused and not, on
# one device, on a tensor-parallel mesh of 2 and on a 2-stage pipeline, the text report, and its
# user errors (exit 2, one line).
# Usage: profile_cli_test.sh path/to/dtensor
set -u
DT="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$(dirname "$0")/../cli_test_lib.sh"

"$DT" example gpt --hidden 128 --heads 4 --layers 2 --batch 2 --seq 32 -o "$t/m.dt" --weights "$t/w.safetensors" \
  --inputs "$t/in.safetensors" 2>/dev/null || FAIL "example"

timeout 300 "$DT" profile "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --repeat 2 --threads 2 \
  --json > "$t/p.json" || FAIL "profile --json"
python3 - "$t/p.json" <<'PY' || FAIL "profile JSON structure"
import json, sys
j = json.load(open(sys.argv[1]))
for key in ("model", "threads", "repeat", "time_ms", "peak_bytes", "op_kinds", "top_nodes", "matmuls", "overall",
            "fusion", "collective_ms", "wait_ms"):
    assert key in j, key
assert j["threads"] == 2 and j["repeat"] == 2 and j["time_ms"] > 0 and j["peak_bytes"] > 0 and j["fusion"]
# wall vs CPU time and context switches per timed run (the warm-up is not counted): a run's wall
# time holds its fastest node-to-node span; two threads can keep at most ~2 cores busy
u = j["usage"]
assert u["runs"] == 2 and u["wall_ms"] >= j["time_ms"] * 0.999 and u["cpu_ms"] > 0, u
assert abs(u["cores_busy"] - u["cpu_ms"] / u["wall_ms"]) < 1e-9 and u["cores_busy"] < 2.5, u
assert u["voluntary_switches"] >= 0 and u["involuntary_switches"] >= 0, u
# and the pages it faulted in (a steady-state run that keeps faulting is not recycling its buffers)
assert all(isinstance(u[k], (int, float)) and u[k] >= 0 for k in ("minor_faults", "major_faults")), u
# the BLAS kernels in use are named, so a slow choice shows (OpenBLAS names a core it runs)
assert isinstance(j["blas_kernels"], str) and j["blas_kernels"], j.get("blas_kernels")
kinds = {k["op"]: k for k in j["op_kinds"]}
# 2 layers x 6 linears + lm_head: fc_in fused with its gelu, the attention out and fc_out projections
# with their residual adds; 2 attention nodes; no collectives
assert kinds["linear"]["nodes"] == 7 and kinds["linear+gelu"]["nodes"] == 2, kinds
assert kinds["linear+add"]["nodes"] == 4 and kinds["add"]["nodes"] == 1, kinds
assert "gelu" not in kinds and kinds["scaled_dot_product_attention"]["nodes"] == 2, kinds
assert j["collective_ms"] == 0 and j["wait_ms"] == 0 and j["recv_wait_ms"] == 0 and j["sends"] == 0
# Node times (each node's fastest run) add up to at most the fastest run's span. How much of the span
# they fill is not asserted: on a loaded machine a preempted thread leaves gaps between nodes.
assert 0 < sum(k["percent"] for k in j["op_kinds"]) <= 100.5, j["op_kinds"]
assert 1 <= len(j["top_nodes"]) <= 20
ms = [n["ms"] for n in j["top_nodes"]]
assert ms == sorted(ms, reverse=True)
lin = [m for m in j["matmuls"] if m["op"] in ("linear", "linear+gelu", "linear+add")]
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

# --no-fuse: gelu is its own kind again.
timeout 300 "$DT" profile "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --repeat 1 --no-fuse \
  --json > "$t/nf.json" || FAIL "profile --no-fuse"
python3 - "$t/nf.json" <<'PY' || FAIL "profile --no-fuse kinds"
import json, sys
j = json.load(open(sys.argv[1]))
kinds = {k["op"]: k for k in j["op_kinds"]}
assert not j["fusion"] and kinds["linear"]["nodes"] == 13 and kinds["gelu"]["nodes"] == 2, kinds
PY

# Tensor parallel on 2 ranks: rank 0's tables, every rank's times with its collectives and waits.
timeout 300 "$DT" profile "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --repeat 1 --threads 1 \
  --mesh 2 --plan "$ROOT/examples/gpt_tp.json" --json > "$t/mesh.json" || FAIL "profile --mesh 2"
python3 - "$t/mesh.json" <<'PY' || FAIL "profile --mesh JSON structure"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["mesh"] == "2" and j["ranks"] == 2 and j["rank"] == 0, j.get("mesh")
assert j["usage"]["runs"] == 1 and j["usage"]["wall_ms"] >= j["time_ms"] * 0.999 and j["usage"]["cpu_ms"] > 0, j["usage"]
kinds = {k["op"]: k for k in j["op_kinds"]}
# Megatron tp: all_reduces after attention and the mlp (the default passes may make them one-shot), and waits
assert any("all_reduce" in op for op in kinds), kinds  # the passes may pick one_shot_all_reduce
assert "wait_tensor" in kinds, kinds
ranks = j["per_rank"]
assert [r["rank"] for r in ranks] == [0, 1]
for r in ranks:
    assert r["time_ms"] > 0 and r["peak_bytes"] > 0 and r["collective_ms"] > 0 and r["wait_ms"] >= 0, r
spread = {e["op"]: e for e in j["op_kind_spread"]}
assert set(spread) == set(kinds) and all(e["min_ms"] <= e["max_ms"] for e in spread.values())
# each rank holds half of every column-/row-parallel linear: m stays 64, n or k halves
assert any(m["op"].startswith("linear") and m["n"] == 256 for m in j["matmuls"]), j["matmuls"]
PY
out=$(timeout 300 "$DT" profile "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --repeat 1 \
  --threads 1 --mesh 2 --plan "$ROOT/examples/gpt_tp.json" 2>&1) || FAIL "profile --mesh (text)"
for text in "mesh 2 (2 ranks), rank 0" "collectives ms" "op kind over ranks" "cores busy), context switches" \
            "involuntary, page faults"; do
  echo "$out" | grep -qF "$text" || FAIL "'$text' not in the mesh text report"
done

# A pipeline of 2 stages, 2 micro-batches (forward only, as `run` runs it): per rank its stages,
# its sends and receives (each micro-batch's activation crosses once) and its bubble (the time
# blocked on receives: only the second stage receives).
echo '{"mesh_dims": ["pp"], "pipeline": {"stages": 2, "microbatches": 2, "schedule": "1f1b"}}' > "$t/pp.json"
timeout 300 "$DT" profile "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --repeat 2 --threads 1 \
  --mesh 2 --plan "$t/pp.json" --json > "$t/pp_prof.json" || FAIL "profile of a pipeline"
python3 - "$t/pp_prof.json" <<'PY' || FAIL "profile of a pipeline: JSON structure"
import json, sys
j = json.load(open(sys.argv[1]))
pl = j["pipeline"]
assert pl["schedule"] == "1f1b" and pl["pipeline_ranks"] == 2 and pl["stages"] == 2 and pl["microbatches"] == 2, pl
assert abs(pl["theoretical_bubble"] - 1 / 3) < 1e-12, pl
r0, r1 = j["per_rank"]
assert r0["stages"] == [0] and r1["stages"] == [1], (r0, r1)
# each micro-batch's activation (one tensor) goes from stage 0 to stage 1: m sends, m receives
assert r0["sends"] == 2 and r0["recvs"] == 0 and r1["sends"] == 0 and r1["recvs"] == 2, (r0, r1)
assert r0["recv_wait_ms"] == 0 and r0["bubble"] == 0, r0
assert r1["recv_wait_ms"] >= 0 and abs(r1["bubble"] - r1["recv_wait_ms"] / r1["time_ms"]) < 1e-9, r1
for r in (r0, r1):
    # collective_ms counts issuing the sends and receives too (communication ops)
    assert r["time_ms"] > 0 and r["peak_bytes"] > 0 and r["collective_ms"] >= 0, r
kinds = {k["op"]: k for k in j["op_kinds"]}  # rank 0's: stage 0 (h.0) twice, one per micro-batch
assert kinds["send"]["nodes"] == 2 and kinds["scaled_dot_product_attention"]["nodes"] == 2, kinds
assert j["usage"]["runs"] == 2 and j["usage"]["cpu_ms"] > 0, j["usage"]
PY
out=$(timeout 300 "$DT" profile "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --repeat 1 \
  --threads 1 --mesh 2 --plan "$t/pp.json" 2>&1) || FAIL "profile of a pipeline (text)"
for text in "pipeline 1f1b: 2 ranks along it, 2 stages, 2 micro-batches; theoretical bubble 33.3%" "recv wait ms" \
  "op kind over ranks"; do
  echo "$out" | grep -qF "$text" || FAIL "'$text' not in the pipeline's text report"
done

out=$(timeout 300 "$DT" profile "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --repeat 1 2>&1) ||
  FAIL "profile (text)"
for text in "op kind" "top nodes" "matmul-like node" "overall:" "peak memory"; do
  echo "$out" | grep -qF "$text" || FAIL "'$text' not in the text report"
done

expect_error "profile needs both --mesh and --plan" profile "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --mesh 2
expect_error "--no-fuse applies to one device only" profile "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --mesh 2 --plan "$ROOT/examples/gpt_tp.json" --no-fuse
expect_error "--repeat must be >= 1, got 0" profile "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --repeat 0
expect_error "pass --weights" profile "$t/m.dt" --inputs "$t/in.safetensors"

finish
