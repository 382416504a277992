#!/usr/bin/env bash
# `dtensor bench model`: the JSON report's structure (not its times) on a tiny gpt with the default
# tensor-parallel plan and with --plan (sequence parallel), and the user errors (exit 2, one line);
# `bench train --vs-torch` with a stand-in Python, so the test never depends on PyTorch.
# Usage: bench_model_cli_test.sh path/to/dtensor
set -u
DT="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$(dirname "$0")/../cli_test_lib.sh"
cd "$ROOT"  # the default plan is examples/gpt_tp.json, relative to the repository root

# vocab 67: the vocabulary-parallel lm_head and embedding split unevenly over 2 ranks
tiny=(--vocab 67 --hidden 32 --heads 4 --layers 1 --batch 1 --seq 8 --rounds 1 --repeat 1)
timeout 300 "$DT" bench model "${tiny[@]}" --json > "$t/tp.json" || FAIL "bench model --json"
timeout 300 "$DT" bench model "${tiny[@]}" --plan examples/gpt_sp.json --json > "$t/sp.json" || FAIL "bench model --plan"
python3 - "$t/tp.json" "$t/sp.json" <<'PY' || FAIL "bench model JSON structure"
import json, sys
for path, plan in ((sys.argv[1], "examples/gpt_tp.json"), (sys.argv[2], "examples/gpt_sp.json")):
    j = json.load(open(path))
    assert j["config"]["plan"] == plan and j["config"]["tp"] == 2 and j["config"]["vocab"] == 67, j["config"]
    for key in ("forward_ms", "forward_threads2_ms", "forward_tp_ms", "tp_efficiency", "gemm_rate_fraction"):
        assert j[key] > 0, key
    assert len(j["rounds"]) == 1 and "torch_forward_ms" not in j
PY
# --bf16: the bf16 forward in the same rounds, and the example gpt written in bf16.
timeout 300 "$DT" bench model "${tiny[@]}" --bf16 --json > "$t/bf16.json" || FAIL "bench model --bf16"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["forward_bf16_ms"] > 0 and j["bf16_speedup"] > 0 and "dtensor_bf16_ms" in j["rounds"][0], j' \
  "$t/bf16.json" || FAIL "bench model --bf16 JSON"
# --tp-overlap-chunks: the tp forward with the tp-overlap pass forced on, in the same rounds.
timeout 300 "$DT" bench model "${tiny[@]}" --tp-overlap-chunks 2 --json > "$t/ov.json" || FAIL "bench model --tp-overlap-chunks"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["forward_tp_overlap_ms"] > 0 and j["tp_overlap_speedup"] > 0 and "dtensor_tp_overlap_ms" in j["rounds"][0], j' \
  "$t/ov.json" || FAIL "bench model --tp-overlap-chunks JSON"
"$DT" example gpt --vocab 67 --hidden 32 --heads 4 --layers 1 --dtype bf16 -o "$t/g16.dt" && grep -q "bf16\[" "$t/g16.dt" ||
  FAIL "example gpt --dtype bf16 writes bf16 parameters"
expect_error "--dtype: f16 not in {f32,bf16}" example gpt --dtype f16
"$DT" bench model "${tiny[@]}" --plan examples/gpt_sp.json | grep -q "tp 2 (examples/gpt_sp.json): " ||
  FAIL "the text report names the plan"

expect_error "cannot open plan $t/none.json" bench model "${tiny[@]}" --plan "$t/none.json"

# bench train --vs-torch against a stand-in for /usr/bin/python3 (no torch needed): one that has
# "torch" and prints a step time, one that has not, and a missing script.
printf '#!/bin/sh\n[ "$1" = -c ] && exit 0\necho "{\\"part\\": \\"$2\\", \\"min_ms\\": 7.5}"\n' > "$t/python_torch"
printf '#!/bin/sh\nexit 1\n' > "$t/python_none"
chmod +x "$t/python_torch" "$t/python_none"
small=(--vocab 67 --hidden 32 --heads 4 --layers 1 --batch 1 --seq 8 --steps 2 --meshes "" --fsdp "")
timeout 300 "$DT" bench train "${small[@]}" --vs-torch --rounds 2 --python "$t/python_torch" --json > "$t/train.json" ||
  FAIL "bench train --vs-torch"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["torch_step_ms"] == 7.5 and len(j["torch_rounds"]) == 2 and abs(j["torch_step_over_dtensor_step"] * j["step_ms"] - 7.5) < 1e-9, j' \
  "$t/train.json" || FAIL "bench train --vs-torch JSON"
timeout 300 "$DT" bench train "${small[@]}" --vs-torch --python "$t/python_none" | grep -q "cannot import torch: skipping" ||
  FAIL "bench train --vs-torch without torch says it skips"
expect_error "bench train --vs-torch needs $t/none.py" bench train "${small[@]}" --vs-torch --torch-script "$t/none.py"
expect_error "--tp must be >= 2" bench model "${tiny[@]}" --tp 1
finish
