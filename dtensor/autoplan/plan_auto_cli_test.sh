#!/bin/bash
# `dtensor run gpt.dt --mesh 4 --plan auto` matches the single-device run; --save-plan writes a
# plan that runs the same; an impossible --max-memory-per-rank and --save-plan without auto are
# errors (exit 2).
set -euo pipefail
DT="$1"
EXAMPLES="$(cd "$(dirname "$0")/../../examples" && pwd)"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
"$DT" example gpt --layers 2 -o g.dt --weights w.safetensors --inputs i.safetensors >/dev/null
"$DT" run g.dt --weights w.safetensors --inputs i.safetensors --save-outputs one.safetensors >/dev/null
"$DT" run g.dt --weights w.safetensors --inputs i.safetensors --mesh 4 --plan auto --save-plan auto.json \
  --expect one.safetensors | grep "compared with one.safetensors.*: match" >/dev/null
"$DT" run g.dt --weights w.safetensors --inputs i.safetensors --mesh 4 --plan auto.json --expect one.safetensors \
  | grep ": match" >/dev/null
set +e
"$DT" plan-search g.dt --mesh 2 --max-memory-per-rank 1KB 2>err.txt; rc=$?
set -e
[ "$rc" = 2 ] && grep -q "smallest per-rank memory found is" err.txt
set +e
"$DT" run g.dt --weights w.safetensors --inputs i.safetensors --mesh 4 --plan auto.json --save-plan x.json 2>err.txt; rc=$?
set -e
[ "$rc" = 2 ] && grep -q -- "--save-plan applies to --plan auto only" err.txt
# Under a limit, the compiled program's estimate (after the passes, which get the budget the
# search asked for) stays under it.
"$DT" compile g.dt --mesh 4 --plan auto --max-memory-per-rank 1000000 --report --json >report.json
peak=$(grep -m1 '"estimated_peak_bytes"' report.json | tr -dc 0-9)
[ -n "$peak" ] && [ "$peak" -le 1000000 ]
# examples/gpt.dt on 4 ranks under 800,000 bytes: the plan gathers an fsdp bias that only tp index
# 0 adds; every rank must still issue that gather (this once failed the cross-rank check).
"$DT" compile "$EXAMPLES/gpt.dt" --mesh 4 --plan auto --max-memory-per-rank 800000 --report >/dev/null
"$DT" plan-search g.dt --mesh 2x2 --json | grep "\"estimated_step_us\"" >/dev/null
# bench auto-vs-hand runs the auto plan and every 1-d/2-d hand plan of examples/ (4 here) once.
"$DT" bench auto-vs-hand --examples "$EXAMPLES" --hidden 32 --heads 2 --layers 1 --vocab 64 --batch 4 --seq 8 \
  --rounds 1 --repeat 1 --json >vs.json
grep '"auto_over_best_hand"' vs.json >/dev/null
[ "$(grep -c '"gpt_[a-z_]*.json": ' vs.json)" = 4 ]
# The same for the training step (--train: the search with --train, SGD steps).
"$DT" bench auto-vs-hand --examples "$EXAMPLES" --hidden 32 --heads 2 --layers 1 --vocab 64 --batch 4 --seq 8 \
  --rounds 1 --repeat 1 --train --json >vs_train.json
grep '"auto_over_best_hand"' vs_train.json >/dev/null
[ "$(grep -c '"gpt_[a-z_]*.json": ' vs_train.json)" = 4 ]
echo ok
