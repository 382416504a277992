#!/usr/bin/env bash
# Pipeline training under mpirun (issue 32): the example gpt (hidden 512, 4 layers, batch 8) on a pp
# mesh of 2 processes (gpipe m 2, 1f1b m 4) and 4 processes (1f1b m 4), one stage per process, must
# give the single-device losses (within 1e-5 relative) and only rank 0 reports. `timeout 180` around
# mpirun so a hang fails the test. Exits 77 (skipped, with the reason) while the CLI refuses pipeline
# training on the mpi backend.
# Usage: run_train_pipeline_test.sh MPIEXEC DTENSOR
set -u
mpiexec=$1 dtensor=$2
source "$(dirname "$0")/mpi_test_lib.sh"
"$dtensor" example gpt --hidden 512 --heads 8 --layers 4 --vocab 1000 --batch 8 --seq 16 --loss -o "$out/gpt.dt" \
  --weights "$out/w.safetensors" --inputs "$out/d.safetensors" >/dev/null || fail "dtensor example"
args=(train "$out/gpt.dt" --weights "$out/w.safetensors" --data "$out/d.safetensors" --steps 2)
"$dtensor" "${args[@]}" > "$out/single" 2>&1 || fail "single-device run: $(cat "$out/single")"
for run in "2 gpipe 2" "2 1f1b 4" "4 1f1b 4"; do
  read -r np schedule m <<<"$run"
  echo "{\"mesh_dims\": [\"pp\"], \"pipeline\": {\"stages\": $np, \"microbatches\": $m, \"schedule\": \"$schedule\"}}" \
    > "$out/plan.json"
  timeout 180 "$mpiexec" --oversubscribe --allow-run-as-root -np "$np" "$dtensor" "${args[@]}" --mesh "$np" \
    --plan "$out/plan.json" --backend mpi >"$out/stdout" 2>"$out/stderr"
  status=$?
  if grep -q "pipeline training runs on the threads backend so far" "$out/stderr"; then
    echo "SKIP: pipeline training on the mpi backend is not supported yet"
    exit 77
  fi
  [[ $status == 124 ]] && fail "pp $np $schedule m $m: mpirun did not finish within 180 s"
  [[ $status == 0 ]] || fail "pp $np $schedule m $m: exit status $status, expected 0"
  [[ $(grep -c '^trained ' "$out/stdout") == 1 ]] || fail "pp $np $schedule m $m: expected one report (rank 0's)"
  same_losses "$out/single" "$out/stdout" 2 || fail "pp $np $schedule m $m: losses differ from the single device's"
  echo "pp $np $schedule m $m: the single device's losses"
done
echo "PASS"
