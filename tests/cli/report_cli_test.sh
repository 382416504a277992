#!/usr/bin/env bash
# End-to-end tests of what `dtensor compile --report` and `run --trace` tell a user (issue 18):
# identical ranks share one report block, collective values are named after the module that needed
# them, every collective kind is counted with its bytes, sizes use one unit scheme, the cost
# model's communication time and a per-rank activation estimate are in the text report, and a
# trace under mpirun has every rank's track in one file (when this dtensor has the mpi backend).
# The model: the example gpt at hidden 512, 8 heads, vocab 1000 (the mesh divides neither 1000
# by 3 nor 8 by 3).
# Usage: report_cli_test.sh path/to/dtensor path/to/source [mpirun]
set -u
DT="$1"
SRC="$2"
MPIRUN="${3:-}"
source "$(dirname "$0")/../cli_test_lib.sh"
run() { timeout 300 "$DT" "$@" 2>&1; }

run example gpt --hidden 512 --heads 8 --layers 2 --vocab 1000 --loss -o "$t/m.dt" --weights "$t/w.safetensors" \
    --inputs "$t/in.safetensors" >/dev/null || FAIL "example"

# tp 4: ranks 1-3's programs are alike, so one block "ranks 1-3"; rank 0 adds the residuals before
# their reductions (the residual added once, ir/sharding_elementwise.cc), so it has a block of its own.
out=$(run compile "$t/m.dt" --mesh 4 --plan "$SRC/examples/gpt_tp_vocab.json" --report)
[ $? -eq 0 ] || FAIL "compile --report: $out"
[ "$(echo "$out" | grep -c '^rank\|^ranks')" -eq 2 ] || FAIL "identical ranks not collapsed into one block: $out"
echo "$out" | grep -q '^rank 0: ' || FAIL "rank 0's block: $out"
echo "$out" | grep -qE '^ranks 1-3: [0-9]+ nodes, parameters [0-9.]+ MiB, activations [0-9.]+ (KiB|MiB) \(estimated peak\), sends [0-9.]+ (KiB|MiB)$' \
  || FAIL "block header (units, activation estimate): $out"
echo "$out" | grep -q "(4 ranks, dims" || FAIL "rank count: $out"
echo "$out" | grep -qE '^estimated communication time [0-9.]+ ms' || FAIL "no communication time in the text report: $out"
# Module paths: the residual stream after each block's attention and MLP is all-reduced (the
# rowwise o_proj and fc_out outputs plus the residual), the vocabulary-parallel embedding's output
# too, and the logits gathered (named after the output).
for v in h.0.attn.out.ar h.1.attn.out.ar h.0.out.ar h.1.out.ar wte.out.ar logits.ag; do
  echo "$out" | grep -qE "^  $v(\.w)? " || FAIL "no collective value named $v: $out"
done
echo "$out" | grep -qE '^  [0-9]+\.(ar|ag|rs)' && FAIL "a collective still named after a value number: $out"
# Every kind counted, the in-place gather included, with its bytes (250 x 32 x 2 f32 to 3 peers).
echo "$out" | grep -q "^  total all_gather_into_tensor: 1, 187.50 KiB sent$" || FAIL "all_gather_into_tensor not counted: $out"
echo "$out" | grep -q "[0-9] bytes" && FAIL "a size in raw bytes: $out"
json=$(run compile "$t/m.dt" --mesh 4 --plan "$SRC/examples/gpt_tp_vocab.json" --json)
python3 - <<PY || FAIL "--json report"
import json
j = json.loads('''$json''')
assert len(j["ranks"]) == 4
assert all(r["activation_bytes_estimate"] > 0 for r in j["ranks"])
assert j["ranks"][0]["bytes_sent_per_kind"]["all_gather_into_tensor"] == 250 * 32 * 2 * 4 * 3
# Every plan has the estimate --plan auto ranks plans by: compute plus each collective kind.
assert j["estimated_step_us"] > j["estimated_compute_us"] > 0
assert abs(j["estimated_step_us"] - j["estimated_compute_us"] - sum(j["estimated_comm_us_per_kind"].values())) < 1e-6 * j["estimated_step_us"]
assert j["estimated_peak_bytes"] > 0
PY

# One rank: "1 rank", and sizes never in raw bytes or "ranks".
out=$(run compile "$t/m.dt" --mesh 1 --plan "$SRC/examples/gpt_tp_vocab.json" --report 2>/dev/null)
echo "$out" | grep -q "(1 rank, dims" || FAIL "one rank: $out"
echo "$out" | grep -q "^rank 0: " || FAIL "one rank's block: $out"

# tp 3 (heads and vocabulary not divisible): ranks hold different shards; blocks name their ranks.
out=$(run compile "$t/m.dt" --mesh 3 --plan "$SRC/examples/gpt_tp_vocab.json" --report)
[ $? -eq 0 ] || FAIL "compile --report on 3: $out"
n=$(echo "$out" | grep -cE '^ranks? [0-9]')
[ "$n" -ge 1 ] && [ "$n" -le 3 ] || FAIL "tp 3 blocks: $out"
echo "$out" | grep -E '^ranks? [0-9]' | sed -E 's/^ranks? ([0-9, -]+):.*/\1/' | tr -d ' ' | tr ',' '\n' | \
  python3 -c "
import sys
ranks = []
for p in sys.stdin.read().split():
    a, _, b = p.partition('-')
    ranks += range(int(a), int(b or a) + 1)
assert sorted(ranks) == [0, 1, 2], ranks
" || FAIL "tp 3 blocks do not cover ranks 0-2 once each: $out"

# A trace under mpirun: rank 0 writes one file with both ranks' tracks.
if [ -n "$MPIRUN" ]; then
  out=$(timeout 300 "$MPIRUN" --oversubscribe --allow-run-as-root -np 2 "$DT" run "$t/m.dt" --weights "$t/w.safetensors" \
        --inputs "$t/in.safetensors" --mesh 2 --plan "$SRC/examples/gpt_tp.json" --trace "$t/trace.json" 2>&1)
  [ $? -eq 0 ] || FAIL "mpirun run --trace: $out"
  python3 - "$t/trace.json" <<'PY' || FAIL "mpirun trace does not hold both ranks' tracks"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
tids = {e["tid"] for e in ev}
assert tids == {0, 1}, tids
for r in (0, 1):
    x = [e for e in ev if e["tid"] == r and e["ph"] == "X"]
    assert any(e["cat"] == "comm" for e in x) and any(e["cat"] == "compute" for e in x), r
    b = [e for e in ev if e["tid"] == r and e["ph"] == "b"]
    assert b and len(b) == len([e for e in ev if e["tid"] == r and e["ph"] == "e"]), r
PY
fi

finish
