#!/usr/bin/env bash
# Stress tests of issue 29's items 1-4 (README "Guarantees": a sharded checkpoint is whole or
# refused), each a fixed number of trials:
#   kill    - SIGKILL of `shard-weights` at spread-out moments of a save over a checkpoint, then
#             SIGTERM/SIGINT, which must leave no temporaries or unfinished generation;
#   writers - two saves of different weights into the same DIR at once (20 trials);
#   torn    - `run --weights DIR` while another process rewrites DIR again and again.
# After every trial DIR is read by `run --weights DIR` (fsdp x tp on 2x2, whose replicated copies
# are where torn sets used to pass): its outputs must equal, bitwise, those of weight set A or of
# set B, or the read must be refused with a one-line error (exit 2). A run that exits 0 with other
# outputs (a wrong "match"), fails a comparison (exit 1), or crashes counts as a mixed set: there
# must be none.
# Usage: checkpoint_stress_test.sh path/to/dtensor path/to/source kill|writers|torn
set -u
DT="$1"
SRC="$2"
MODE="$3"
source "$(dirname "$0")/../cli_test_lib.sh"
PLAN="$SRC/examples/gpt_fsdp_tp.json"
MESH=2x2

"$DT" example gpt --hidden 256 --layers 4 -o "$t/m.dt" --weights "$t/wa.safetensors" --inputs "$t/in.safetensors" \
  >/dev/null 2>&1 || FAIL "example A"
"$DT" example gpt --hidden 256 --layers 4 --weights "$t/wb.safetensors" --seed 1 >/dev/null 2>&1 || FAIL "example B"
save() {  # save <weights> <dir> [<stderr file>]: returns shard-weights' exit code
  "$DT" shard-weights "$t/m.dt" --weights "$1" --mesh $MESH --plan "$PLAN" -o "$2" >/dev/null 2>"${3:-/dev/null}"
}
# save_bg <weights> <dir> [<stderr file>]: save in the background, $! its pid (not a subshell's);
# SIGINT back to its default (a script's background jobs start with it ignored).
save_bg() {
  env --default-signal=INT "$DT" shard-weights "$t/m.dt" --weights "$1" --mesh $MESH --plan "$PLAN" -o "$2" >/dev/null 2>"${3:-/dev/null}" &
}
run_outputs() {  # run_outputs <dir> <out>: run with --weights DIR, saving the outputs
  timeout 120 "$DT" run "$t/m.dt" --weights "$1" --inputs "$t/in.safetensors" --mesh $MESH --plan "$PLAN" \
    --save-outputs "$2" 2>&1
}
save "$t/wa.safetensors" "$t/ckA" || FAIL "save A"
save "$t/wb.safetensors" "$t/ckB" || FAIL "save B"
run_outputs "$t/ckA" "$t/outA.safetensors" >/dev/null || FAIL "run A"
run_outputs "$t/ckB" "$t/outB.safetensors" >/dev/null || FAIL "run B"
cmp -s "$t/outA.safetensors" "$t/outB.safetensors" && FAIL "weight sets A and B give the same outputs"

mixed=0 refused=0 seen_a=0 seen_b=0
classify() {  # classify <dir> <what>: reads DIR and counts the outcome
  local out status
  out=$(run_outputs "$1" "$t/o.safetensors")
  status=$?
  if [ $status -eq 0 ] && cmp -s "$t/o.safetensors" "$t/outA.safetensors"; then
    seen_a=$((seen_a + 1))
  elif [ $status -eq 0 ] && cmp -s "$t/o.safetensors" "$t/outB.safetensors"; then
    seen_b=$((seen_b + 1))
  elif [ $status -eq 2 ] && [ "$(echo "$out" | wc -l)" -eq 1 ]; then
    refused=$((refused + 1))
    echo "refused ($2): $out"
  else
    mixed=$((mixed + 1))
    FAIL "a mixed set ($2): exit $status: $(echo "$out" | tail -2)"
  fi
  rm -f "$t/o.safetensors"
}
committed() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["generation"])' "$1/checkpoint.json"; }
generations() { ls -d "$1"/gen-* 2>/dev/null | wc -l; }
temporaries() { find "$1" -name '*.dtensor-tmp-*' | wc -l; }

case "$MODE" in
kill)
  # The kill moments spread over one save's duration, measured here (so they follow the machine's
  # speed): 12 trials from 0 to 1.2 times it, alternating the weights written.
  t0=$(date +%s%N)
  save "$t/wa.safetensors" "$t/dir" || FAIL "first save"
  dur=$(($(date +%s%N) - t0))
  interrupted=0
  for k in $(seq 1 12); do
    w="$t/wb.safetensors"
    [ $((k % 2)) -eq 0 ] && w="$t/wa.safetensors"
    save_bg "$w" "$t/dir"
    pid=$!
    sleep "$(awk -v d="$dur" -v k="$k" 'BEGIN { printf "%.4f", d * k / 10 / 1e9 }')"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    [ "$(generations "$t/dir")" -gt 1 ] || [ "$(temporaries "$t/dir")" -gt 0 ] && interrupted=$((interrupted + 1))
    classify "$t/dir" "kill trial $k"
  done
  # The next save removes what the killed ones left.
  save "$t/wa.safetensors" "$t/dir" || FAIL "save after the kills"
  [ "$(generations "$t/dir")" -eq 1 ] || FAIL "stale generations left: $(ls -A "$t/dir")"
  [ "$(temporaries "$t/dir")" -eq 0 ] || FAIL "temporaries left: $(ls -A "$t/dir")"
  # SIGTERM and SIGINT at the same moments: the save removes its temporaries and unfinished
  # generation before it ends.
  for k in $(seq 1 8); do
    sig=TERM
    [ $((k % 2)) -eq 0 ] && sig=INT
    before=$(committed "$t/dir")
    save_bg "$t/wb.safetensors" "$t/dir"
    pid=$!
    sleep "$(awk -v d="$dur" -v k="$k" 'BEGIN { printf "%.4f", d * k / 7 / 1e9 }')"
    kill -$sig $pid 2>/dev/null
    wait $pid 2>/dev/null
    [ "$(temporaries "$t/dir")" -eq 0 ] || FAIL "SIG$sig left temporaries: $(find "$t/dir" -name '*.dtensor-tmp-*')"
    # Left: the committed generation, and the one it replaced if the signal came while that was
    # being removed (the next save removes it); nothing of an unfinished save.
    after=$(committed "$t/dir")
    for g in "$t/dir"/gen-*; do
      g=$(basename "$g")
      [ "$g" = "$before" ] || [ "$g" = "$after" ] || FAIL "SIG$sig left an unfinished generation $g"
    done
    classify "$t/dir" "SIG$sig trial $k"
  done
  [ "$refused" -eq 0 ] || FAIL "$refused reads refused after a killed save: the previous checkpoint must remain"
  echo "kill: 12 SIGKILL trials ($interrupted mid-save) + 8 SIGTERM/INT, read back A $seen_a, B $seen_b, mixed $mixed"
  ;;
writers)
  save "$t/wa.safetensors" "$t/dir" || FAIL "first save"
  locked=0
  for k in $(seq 1 20); do
    save_bg "$t/wa.safetensors" "$t/dir" "$t/err1"
    p1=$!
    save_bg "$t/wb.safetensors" "$t/dir" "$t/err2"
    p2=$!
    wait $p1
    s1=$?
    wait $p2
    s2=$?
    for s in "$s1 $t/err1" "$s2 $t/err2"; do
      set -- $s
      if [ "$1" -eq 2 ] && grep -q "is being written by another process" "$2" && [ "$(wc -l <"$2")" -eq 1 ]; then
        locked=$((locked + 1))
      elif [ "$1" -ne 0 ]; then
        FAIL "writer exit $1: $(cat "$2")"
      fi
    done
    classify "$t/dir" "writers trial $k"
  done
  [ "$refused" -eq 0 ] || FAIL "$refused reads refused after concurrent saves"
  echo "writers: 20 trials, $locked saves refused by the lock, read back A $seen_a, B $seen_b, mixed $mixed"
  ;;
torn)
  save "$t/wa.safetensors" "$t/dir" || FAIL "first save"
  (
    for k in $(seq 1 400); do
      [ -e "$t/stop" ] && break
      if [ $((k % 2)) -eq 0 ]; then save "$t/wa.safetensors" "$t/dir"; else save "$t/wb.safetensors" "$t/dir"; fi
    done
  ) &
  writer=$!
  for k in $(seq 1 30); do classify "$t/dir" "torn trial $k"; done
  touch "$t/stop"
  wait $writer
  echo "torn: 30 reads during rewrites, A $seen_a, B $seen_b, refused $refused, mixed $mixed"
  ;;
*)
  FAIL "unknown mode $MODE"
  ;;
esac
finish
