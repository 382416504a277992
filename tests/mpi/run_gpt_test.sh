#!/usr/bin/env bash
# Runs the reference gpt with the tp plan under mpirun (`dtensor run ... --backend mpi`, one rank
# per process) and checks the outcome; `timeout 120` around mpirun so a hang fails the test.
# Usage: run_gpt_test.sh MPIEXEC DTENSOR SOURCE_DIR REFERENCE_DIR NP MODE [extra dtensor flags...]
#   MODE match:       exit status 0 and the report ends with ": match" (vs PyTorch's output)
#   MODE np_mismatch: nonzero exit and the error naming the -np and the mesh size
set -u
mpiexec=$1 dtensor=$2 src=$3 ref=$4 np=$5 mode=$6
shift 6
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
timeout 120 "$mpiexec" --oversubscribe --allow-run-as-root -np "$np" "$dtensor" run "$src/examples/gpt.dt" \
  --weights "$ref/gpt/weights.safetensors" --inputs "$ref/gpt/inputs.safetensors" \
  --expect "$ref/gpt/outputs.safetensors" --mesh 4 --plan "$src/examples/gpt_tp.json" --backend mpi "$@" \
  >"$out/stdout" 2>"$out/stderr"
status=$?
cat "$out/stdout"
fail() {
  echo "FAIL: $*"
  echo "--- stderr"; cat "$out/stderr"
  exit 1
}
[[ $status == 124 ]] && fail "mpirun did not finish within 120 s"
case $mode in
  match)
    [[ $status == 0 ]] || fail "exit status $status, expected 0"
    grep -q '(4 ranks, mpi backend)' "$out/stdout" || fail "report does not say 4 ranks on the mpi backend"
    [[ $(grep -c '^  rank [0-3]:' "$out/stdout") == 4 ]] || fail "report does not list 4 ranks"
    grep -q ': match$' "$out/stdout" || fail "output does not match PyTorch's" ;;
  np_mismatch)
    [[ $status != 0 ]] || fail "exit status 0 with -np $np for a 4-rank mesh"
    grep -q "mpirun started $np processes but the mesh has 4 ranks: run with mpirun -np 4" "$out/stderr" ||
      fail "no clear -np mismatch error" ;;
  *) fail "unknown mode $mode" ;;
esac
echo "PASS"
