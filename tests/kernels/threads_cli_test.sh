#!/usr/bin/env bash
# `--threads N` on run and train (dtensor/core/parallel.h): out-of-range counts are user errors
# (exit 2, one line), and runs with 1, 2 and 3 threads per rank give the same loss to the last
# printed digit (the kernels' bitwise equality itself is tested in parallel_test and
# parallel_gpt_test). A small gpt (hidden 256, 256 tokens) so that GEMMs and row loops split.
# Usage: threads_cli_test.sh path/to/dtensor path/to/source
set -u
DT="$1"
SRC="$2"
source "$(dirname "$0")/../cli_test_lib.sh"


"$DT" example gpt --hidden 256 --heads 4 --batch 4 --seq 64 --loss -o "$t/m.dt" --weights "$t/w.safetensors" \
  --inputs "$t/in.safetensors" 2>/dev/null || FAIL "example"

expect_error "--threads must be between 1 and 1024, got 0" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --threads 0
expect_error "--threads must be between 1 and 1024, got 5000" train "$t/m.dt" --weights "$t/w.safetensors" --data "$t/in.safetensors" --threads 5000

loss() {  # loss <threads> [extra args]: output 1 (the loss) of run --json
  local n="$1"
  shift
  timeout 300 "$DT" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --json --threads "$n" "$@" |
    python3 -c 'import json,sys; print(repr(json.load(sys.stdin)["outputs"][1]["value"]))'
}
l1=$(loss 1) || FAIL "run --threads 1"
for n in 2 3; do
  ln=$(loss "$n") || FAIL "run --threads $n"
  [ "$ln" = "$l1" ] || FAIL "loss with --threads $n ($ln) differs from --threads 1 ($l1)"
done
# Two rank threads with two threads each match the single-device run.
out=$(timeout 300 "$DT" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --json --threads 2 \
  --mesh 2 --plan "$SRC/examples/gpt_tp.json") || FAIL "run --mesh 2 --threads 2"
echo "$out" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["match"] else 1)' ||
  FAIL "run --mesh 2 --threads 2 does not match the single-device run"

out=$(timeout 300 "$DT" train "$t/m.dt" --weights "$t/w.safetensors" --data "$t/in.safetensors" --steps 2 --threads 2 --json) ||
  FAIL "train --threads 2"
echo "$out" | grep -q '"losses"' || FAIL "train --threads 2 printed no losses: $out"

finish
