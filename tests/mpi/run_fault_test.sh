#!/usr/bin/env bash
# Runs one fault-injection case of mpi_fault_driver (pipeline_kill: of pipeline_fault_driver)
# under mpirun and checks that the job ends (never hangs: `timeout 60` around mpirun), how it ends
# (exit status), and what the surviving ranks said (their CommError on stderr).
# Usage: run_fault_test.sh MPIEXEC DRIVER CASE
set -u
mpiexec=$1 driver=$2 case=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
flags=(--oversubscribe --allow-run-as-root -np 3)
expect_status=nonzero
# A *_mpipath case forces all_reduce through MPI_Iallreduce instead of the shared-memory arena.
if [[ $case == *_mpipath ]]; then
  export DTENSOR_MPI_ALL_REDUCE=mpi
  case=${case%_mpipath}
fi
mode=$case
case $case in
  exit_default) mode=exit ;;  # plain mpirun: Open MPI itself kills the job when a rank exits early
  exit_recovery | kill_recovery)
    # --enable-recovery keeps the survivors running so that they detect the failure themselves
    # (Open MPI's own exit status is then 0 even though they abort, so it is not checked).
    mode=${case%_recovery}; flags+=(--enable-recovery); expect_status=any ;;
  pipeline_kill) mode=mpi; flags+=(--enable-recovery); expect_status=any ;;
esac
start=$(date +%s)
DTENSOR_FLIGHT_RECORDER_DIR=$out/flight timeout 60 "$mpiexec" "${flags[@]}" "$driver" "$mode" \
  >"$out/stdout" 2>"$out/stderr"
status=$?
elapsed=$(( $(date +%s) - start ))
fail() {
  echo "FAIL [$case]: $*"
  echo "--- exit status $status after ${elapsed}s; stderr:"; cat "$out/stderr"
  echo "--- stdout:"; cat "$out/stdout"
  exit 1
}
expect() { grep -qF -- "$1" "$out/stderr" || fail "stderr lacks: $1"; }
[ $status -eq 124 ] && fail "mpirun hung (killed by timeout 60)"
[ $elapsed -le 30 ] || fail "took ${elapsed}s (timeout is 3 s)"
[ $expect_status = nonzero ] && [ $status -eq 0 ] && fail "mpirun exited 0"
grep -qF "no fault detected" "$out/stdout" && fail "a rank did not detect the fault"
survivor_timeout() {  # the CommError of a survivor whose collective #2 on group $2 timed out
  expect "[rank $1] dtensor: error: all_reduce(f32, 1000, sum) collective #2 on group $2 timed out after 3000 ms on rank $1"
}
case $case in
  exit_default) ;;
  exit_recovery | kill_recovery)
    survivor_timeout 0 "[0, 1, 2]"
    expect "ranks that did not arrive: [1] (rank 1: no answer within 750 ms, process dead or unreachable)" ;;
  stall)
    survivor_timeout 0 "[0, 1, 2]"
    expect "ranks that did not arrive: [1] (rank 1: alive, last issued collective #1 (all_reduce))"
    # The flight recorder dump of rank 0 parses and holds the failed collective.
    [ -f "$out/flight/rank_0.json" ] || fail "no flight recorder dump at flight/rank_0.json"
    python3 - "$out/flight/rank_0.json" <<'PY' || fail "bad flight recorder dump"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["rank"] == 0, d
e = d["entries"]
assert [x["state"] for x in e] == ["completed", "failed"], e
assert e[1]["op"] == "all_reduce" and e[1]["seq"] == 2 and e[1]["group"] == [0, 1, 2], e[1]
assert "timed out" in e[1]["error"] and e[1]["bytes"] == 4000, e[1]
PY
    expect "(flight recorder dumped to $out/flight/rank_0.json)" ;;
  mismatch)
    expect "collective #2 on group [0, 1, 2] mismatch: rank 0 issued all_reduce(f32, 1000, sum), rank 1 issued all_gather(f32, 1000)" ;;
  mismatch_elsewhere)
    # Every rank names the mismatch, rank 2 (outside the group, with a 60 s timeout) included,
    # and the job ends in well under its timeout (elapsed <= 30 s above).
    mismatch="collective #1 on group [0, 1] mismatch: rank 0 issued all_reduce(f32, 1000, sum), rank 1 issued all_gather(f32, 1000)"
    expect "[rank 0] dtensor: error: $mismatch"
    expect "[rank 2] dtensor: error: $mismatch"
    grep -q "timed out" "$out/stderr" && fail "a rank timed out instead of learning the mismatch" ;;
  subgroup_stall)
    survivor_timeout 0 "[0, 2]"
    expect "ranks that did not arrive: [2] (rank 2: alive, last issued collective #1 (all_reduce))" ;;
  pipeline_kill)
    # Stage 1 of 3 dies mid-step: both neighbours time out on a transfer with it and name it dead,
    # in their own line or in the other's announcement (whichever reached them first).
    expect "[rank 1] pipeline_fault_driver: dying after matmul #2 of the step"
    for r in 0 2; do
      grep -E "^\[rank $r\] dtensor: error: (send|recv)\(.*rank 1: no answer within 750 ms, process dead or unreachable" \
        "$out/stderr" >/dev/null || fail "rank $r does not name rank 1 as dead"
    done
    expect "timed out after 3000 ms on rank" ;;
  *) fail "unknown case" ;;
esac
echo "PASS [$case] in ${elapsed}s (mpirun exit status $status)"
