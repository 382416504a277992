#!/usr/bin/env bash
# Training under mpirun (docs/training.md): gpt hidden 512, 8 heads, 1 layer, vocabulary 1000, 3 SGD
# steps on a 2x2 mesh with the fsdp x tp plan, one rank per process, default passes, must give the
# threads backend's losses (within 1e-5 relative: the same programs, the same collectives), and only
# rank 0 reports. `timeout 180` around mpirun so a hang fails the test.
# Usage: run_train_test.sh MPIEXEC DTENSOR SOURCE_DIR
set -u
mpiexec=$1 dtensor=$2 src=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() {
  echo "FAIL: $*"
  echo "--- stdout"; cat "$out/stdout" 2>/dev/null
  echo "--- stderr"; cat "$out/stderr" 2>/dev/null
  exit 1
}
"$dtensor" example gpt --hidden 512 --heads 8 --layers 1 --vocab 1000 --loss -o "$out/gpt.dt" \
  --weights "$out/w.safetensors" --inputs "$out/d.safetensors" >/dev/null || fail "dtensor example"
args=(train "$out/gpt.dt" --weights "$out/w.safetensors" --data "$out/d.safetensors" --steps 3 --mesh 2x2
      --plan "$src/examples/gpt_fsdp_tp.json")
"$dtensor" "${args[@]}" --backend threads > "$out/threads" 2>&1 || fail "threads run: $(cat "$out/threads")"
timeout 180 "$mpiexec" --oversubscribe --allow-run-as-root -np 4 "$dtensor" "${args[@]}" --backend mpi \
  >"$out/stdout" 2>"$out/stderr"
status=$?
[[ $status == 124 ]] && fail "mpirun did not finish within 180 s"
[[ $status == 0 ]] || fail "exit status $status, expected 0"
[[ $(grep -c '^trained ' "$out/stdout") == 1 ]] || fail "expected one report (rank 0's)"
paste <(grep -o 'loss [0-9.e+-]*' "$out/threads" | head -3 | cut -d' ' -f2) \
      <(grep -o 'loss [0-9.e+-]*' "$out/stdout" | head -3 | cut -d' ' -f2) |
  awk '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) { print "step " n ": " $1 " vs " $2; bad = 1 } }
       END { exit (n == 3 && !bad) ? 0 : 1 }' || fail "mpi losses differ from the threads backend's"
"$mpiexec" --oversubscribe --allow-run-as-root -np 4 "$dtensor" "${args[@]}" --backend mpi \
  --save "$out/x.safetensors" >"$out/stdout" 2>"$out/stderr"
[[ $? == 2 ]] || fail "--save on mpi was not refused with exit 2"
grep -q "not supported on the mpi backend" "$out/stdout" "$out/stderr" || fail "no clear message for --save on mpi"
cat "$out/threads"
echo "PASS"
