#!/usr/bin/env bash
# The flagship 2-d run at a realistic size under mpirun (issue: parallel styles at scale): a gpt of
# hidden 512, 8 heads, 1 layer on a 2x2 dp x tp mesh with the fsdp x tp plan, one rank per process,
# default passes. It hung before the programs were proven rank-consistent; it must finish and match
# dtensor's single-device run. `timeout 180` around mpirun so a hang fails the test.
# Usage: run_h512_fsdp_tp_test.sh MPIEXEC DTENSOR SOURCE_DIR
set -u
mpiexec=$1 dtensor=$2 src=$3
source "$(dirname "$0")/mpi_test_lib.sh"
"$dtensor" example gpt --hidden 512 --heads 8 --layers 1 -o "$out/h512.dt" --weights "$out/w.safetensors" \
  --inputs "$out/i.safetensors" >/dev/null || fail "dtensor example"
timeout 180 "$mpiexec" --oversubscribe --allow-run-as-root -np 4 "$dtensor" run "$out/h512.dt" \
  --weights "$out/w.safetensors" --inputs "$out/i.safetensors" --mesh 2x2 --plan "$src/examples/gpt_fsdp_tp.json" \
  --backend mpi >"$out/stdout" 2>"$out/stderr"
status=$?
[[ $status == 124 ]] && fail "mpirun did not finish within 180 s"
[[ $status == 0 ]] || fail "exit status $status, expected 0"
grep -q ': match$' "$out/stdout" || fail "output does not match the single-device run"
cat "$out/stdout"
echo "PASS"
