#!/usr/bin/env bash
# Pipelines under mpirun (issue 32), one rank per process, each running its own stage's program:
# - training the example gpt (4 layers) on pp 2 (gpipe m 2, 1f1b m 8, interleaved-1f1b v 2 m 4) and
#   pp 4 (gpipe m 4, 1f1b m 4), and pp 2 (1f1b m 2) with --recompute blocks
#   gives the single device's losses within 1e-6 relative, and only rank 0 reports;
# - examples/gpt_pp_dp_tp.json on 2x2x2 (8 processes: 2 stages of dp 2 x tp 2, 1f1b m 2) gives the
#   single device's losses, and its --save DIR (a sharded checkpoint, consolidated) and --grads-out
#   (gathered to rank 0) equal the single device's files (within 1e-5 of each tensor's largest value
#   plus 1e-7);
# - `run` (forward only) on pp 2 and on 2x2x2 gives the single device's outputs.
# - the issue's acceptance run: hidden 512, 5 steps, 2x2x2 gives the single device's losses.
# Small shapes (hidden 64) elsewhere for CI time. `timeout 180` around mpirun so a hang fails.
# Usage: run_train_pipeline_test.sh MPIEXEC DTENSOR SOURCE_DIR
set -u
mpiexec=$1 dtensor=$2 src=$3
source "$(dirname "$0")/mpi_test_lib.sh"
"$dtensor" example gpt --hidden 64 --heads 4 --layers 4 --vocab 128 --batch 8 --seq 16 --loss -o "$out/gpt.dt" \
  --weights "$out/w.safetensors" --inputs "$out/d.safetensors" >/dev/null || fail "dtensor example"
args=(train "$out/gpt.dt" --weights "$out/w.safetensors" --data "$out/d.safetensors" --steps 3 --momentum 0.9 --json)
"$dtensor" "${args[@]}" --save "$out/single.safetensors" --grads-out "$out/single_grads.safetensors" \
  > "$out/single" 2>&1 || fail "single-device run: $(cat "$out/single")"
# mpirun NP ARGS...: dtensor ARGS on NP processes into $out/stdout and $out/stderr; fails on a hang
# or a nonzero exit.
mpi() {
  local np=$1
  shift
  timeout 180 "$mpiexec" --oversubscribe --allow-run-as-root -np "$np" "$dtensor" "$@" --backend mpi \
    >"$out/stdout" 2>"$out/stderr"
  local status=$?
  [[ $status == 124 ]] && fail "$np processes, dtensor $*: mpirun did not finish within 180 s"
  [[ $status == 0 ]] || fail "$np processes, dtensor $*: exit status $status, expected 0"
}
# same_json_losses WHAT [SINGLE]: the losses of $out/stdout's JSON report (rank 0's, the only one)
# are those of SINGLE (default $out/single, the single device's report) within 1e-6 relative.
same_json_losses() {
  python3 - "${2:-$out/single}" "$out/stdout" <<'PY' || fail "$1: losses differ from the single device's"
import json, sys
a, b = (json.load(open(p))["losses"] for p in sys.argv[1:])
assert len(a) == len(b) > 1, (a, b)
for i, (x, y) in enumerate(zip(a, b)):
    assert abs(x - y) <= 1e-6 * abs(x), "step %d: %r vs %r" % (i + 1, x, y)
PY
  echo "$1: the single device's losses"
}
for run in "2 gpipe 2 1" "2 1f1b 8 1" "4 gpipe 4 1" "4 1f1b 4 1" "2 interleaved-1f1b 4 2"; do
  read -r np schedule m v <<<"$run"
  echo "{\"mesh_dims\": [\"pp\"], \"pipeline\": {\"stages\": $np, \"microbatches\": $m, \"schedule\": \"$schedule\", \"virtual_stages\": $v}}" \
    > "$out/plan.json"
  mpi "$np" "${args[@]}" --mesh "$np" --plan "$out/plan.json"
  [[ $(grep -c '"losses"' "$out/stdout") == 1 ]] || fail "pp $np $schedule m $m: expected one report (rank 0's)"
  same_json_losses "pp $np $schedule m $m"
done
# --recompute blocks: each stage recomputes its blocks within its backward, the same losses.
echo '{"mesh_dims": ["pp"], "pipeline": {"stages": 2, "microbatches": 2, "schedule": "1f1b"}}' > "$out/plan.json"
mpi 2 "${args[@]}" --mesh 2 --plan "$out/plan.json" --recompute blocks
same_json_losses "pp 2 1f1b m 2, blocks recomputed"
pp_dp_tp=(--mesh 2x2x2 --plan "$src/examples/gpt_pp_dp_tp.json")
mpi 8 "${args[@]}" "${pp_dp_tp[@]}" --save "$out/pp_dir" --grads-out "$out/pp_grads.safetensors"
same_json_losses "pp x dp x tp 2x2x2"
"$dtensor" checkpoint consolidate "$out/pp_dir" -o "$out/pp.safetensors" >/dev/null || fail "consolidate the 2x2x2 --save DIR"
compare_safetensors "$out/single.safetensors" "$out/pp.safetensors" 1e-7 || fail "2x2x2 --save DIR differs from the single device's --save"
compare_safetensors "$out/single_grads.safetensors" "$out/pp_grads.safetensors" 1e-7 ||
  fail "2x2x2 --grads-out differs from the single device's"
# Forward only: rank 0 compares the last stage's outputs with a single-device run.
echo "{\"mesh_dims\": [\"pp\"], \"pipeline\": {\"stages\": 2, \"microbatches\": 4}}" > "$out/plan.json"
for mesh in "2 --plan $out/plan.json" "2x2x2 --plan $src/examples/gpt_pp_dp_tp.json"; do
  read -r m _ plan <<<"$mesh"
  np=$(( ${m//x/*} ))
  mpi "$np" run "$out/gpt.dt" --weights "$out/w.safetensors" --inputs "$out/d.safetensors" --mesh "$m" --plan "$plan"
  [[ $(grep -c '^compared with single-device run: .*: match$' "$out/stdout") == 1 ]] ||
    fail "run on $m: not one matching report"
  echo "run on $m: the single device's outputs"
done
# The issue's acceptance run: hidden 512, 5 steps, 2x2x2.
"$dtensor" example gpt --hidden 512 --heads 8 --layers 4 --vocab 1000 --batch 8 --seq 16 --loss -o "$out/gpt512.dt" \
  --weights "$out/w512.safetensors" --inputs "$out/d512.safetensors" >/dev/null || fail "dtensor example (hidden 512)"
args=(train "$out/gpt512.dt" --weights "$out/w512.safetensors" --data "$out/d512.safetensors" --steps 5 --json)
"$dtensor" "${args[@]}" > "$out/single512" 2>&1 || fail "single-device run (hidden 512): $(cat "$out/single512")"
mpi 8 "${args[@]}" "${pp_dp_tp[@]}"
same_json_losses "hidden 512, 5 steps, pp x dp x tp 2x2x2" "$out/single512"
echo "PASS"
