#!/usr/bin/env bash
# Training under mpirun (docs/training.md): gpt hidden 512, 8 heads, 1 layer, vocabulary 1000, 3 SGD
# steps on a 2x2 mesh with the fsdp x tp plan, one rank per process, default passes, must give the
# threads backend's losses (within 1e-5 relative: the same programs, the same collectives), and only
# rank 0 reports; --save (a file, or a directory of per-rank shards) and --grads-out gather to rank 0
# and equal the threads backend's. `timeout 180` around mpirun so a hang fails the test.
# Usage: run_train_test.sh MPIEXEC DTENSOR SOURCE_DIR
set -u
mpiexec=$1 dtensor=$2 src=$3
source "$(dirname "$0")/mpi_test_lib.sh"
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
same_losses "$out/threads" "$out/stdout" 3 || fail "mpi losses differ from the threads backend's"
# --recompute blocks under mpirun: the recomputed block's collectives run in the same order on every
# process (a hang fails here) and the losses are the threads backend's without recomputation.
timeout 180 "$mpiexec" --oversubscribe --allow-run-as-root -np 4 "$dtensor" "${args[@]}" --backend mpi \
  --recompute blocks >"$out/stdout" 2>"$out/stderr"
status=$?
[[ $status == 124 ]] && fail "mpirun --recompute blocks did not finish within 180 s"
[[ $status == 0 ]] || fail "--recompute blocks: exit status $status, expected 0"
same_losses "$out/threads" "$out/stdout" 3 || fail "mpi --recompute blocks losses differ from the threads backend's"
# --save FILE, --save DIR and --grads-out under mpirun: rank 0 gathers the shards (trained weights
# and state) and the first step's gradients; they equal the threads backend's files within 1e-5 of
# each tensor's largest magnitude, and DIR holds one file per rank.
"$dtensor" "${args[@]}" --backend threads --momentum 0.9 --save "$out/t.safetensors" \
  --grads-out "$out/tg.safetensors" > "$out/threads2" 2>&1 || fail "threads --save: $(cat "$out/threads2")"
timeout 180 "$mpiexec" --oversubscribe --allow-run-as-root -np 4 "$dtensor" "${args[@]}" --backend mpi \
  --momentum 0.9 --save "$out/m.safetensors" --grads-out "$out/mg.safetensors" >"$out/stdout" 2>"$out/stderr" ||
  fail "mpi --save FILE --grads-out"
timeout 180 "$mpiexec" --oversubscribe --allow-run-as-root -np 4 "$dtensor" "${args[@]}" --backend mpi \
  --momentum 0.9 --save "$out/mdir" >"$out/stdout" 2>"$out/stderr" || fail "mpi --save DIR"
"$dtensor" "${args[@]}" --backend threads --momentum 0.9 --save "$out/tdir" >/dev/null 2>&1 || fail "threads --save DIR"
compare_safetensors "$out/t.safetensors" "$out/m.safetensors" || fail "mpi --save FILE differs from the threads backend's"
compare_safetensors "$out/tg.safetensors" "$out/mg.safetensors" || fail "mpi --grads-out differs from the threads backend's"
# Each checkpoint's manifest (io/sharded_checkpoint.h) names its generation directory.
generation() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["generation"])' "$1/checkpoint.json"; }
tgen=$(generation "$out/tdir") && mgen=$(generation "$out/mdir") || fail "no checkpoint.json in the --save DIRs"
for r in 0 1 2 3; do
  compare_safetensors "$out/tdir/$tgen/rank$r.safetensors" "$out/mdir/$mgen/rank$r.safetensors" || fail "mpi --save DIR rank $r differs"
done
cat "$out/threads"
echo "PASS"
