#!/usr/bin/env bash
# End-to-end regression tests of issue 13 (README "Guarantees"): inputs are never modified,
# outputs are atomic, user errors exit 2 with one line (never an internal check, a signal or a
# hang), --timeout-s is validated. Every command runs under `timeout` so a hang fails, not stalls.
# Usage: cli_hardening_test.sh path/to/dtensor path/to/source
set -u
DT="$1"
SRC="$2"
PLAN="$SRC/examples/gpt_tp.json"
source "$(dirname "$0")/../cli_test_lib.sh"

# expect <code> <text> <args...>: dtensor exits with <code> and its stderr+stdout contains <text>.
expect() {
  local code="$1" text="$2"
  shift 2
  local out status
  out=$(timeout 60 "$DT" "$@" 2>&1)
  status=$?
  [ "$status" -eq "$code" ] || FAIL "exit $status (want $code): dtensor $*: $(echo "$out" | tail -3)"
  echo "$out" | grep -qF -- "$text" || FAIL "'$text' not in output of dtensor $*: $(echo "$out" | tail -3)"
  # A user error is one line, never an internal check with a source path.
  if [ "$code" -eq 2 ]; then
    [ "$(echo "$out" | wc -l)" -eq 1 ] || FAIL "more than one line: dtensor $*: $out"
    echo "$out" | grep -qE '\.(cc|h):[0-9]+' && FAIL "source path in a user error: dtensor $*: $out"
  fi
}
no_temporaries() {  # no_temporaries <dir>: no staged file left behind
  if ls -A "$1" | grep -q dtensor-tmp; then FAIL "temporaries left in $1: $(ls -A "$1")"; fi
}

"$DT" example gpt -o "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" 2>/dev/null || FAIL "example"
cp "$t/w.safetensors" "$t/w.orig"

# 1. shard-weights with --weights inside -o: a checkpoint writes only checkpoint.json, gen-*/ and
# its lock file there, so a file under another name is left alone, and one named checkpoint.json
# is refused.
mkdir -p "$t/out" "$t/out2"
cp "$t/w.safetensors" "$t/out/rank0.safetensors"
expect 0 "4 ranks" shard-weights "$t/m.dt" --weights "$t/out/rank0.safetensors" --mesh 4 --plan "$PLAN" -o "$t/out"
cmp -s "$t/out/rank0.safetensors" "$t/w.orig" || FAIL "shard-weights modified its input"
cp "$t/w.safetensors" "$t/out2/checkpoint.json"
expect 2 "is the same file as weights" shard-weights "$t/m.dt" --weights "$t/out2/checkpoint.json" --mesh 4 --plan "$PLAN" -o "$t/out2"
cmp -s "$t/out2/checkpoint.json" "$t/w.orig" || FAIL "shard-weights modified its input"

# 3. A save that fails part-way (here: a file size limit, so the first rank file cannot be
# written) leaves the previous checkpoint as it was, and no temporaries or partial generation.
expect 0 "4 ranks" shard-weights "$t/m.dt" --weights "$t/w.safetensors" --mesh 4 --plan "$PLAN" -o "$t/shards"
cp -r "$t/shards" "$t/shards.orig"
"$DT" example gpt --weights "$t/w2.safetensors" --seed 7 2>/dev/null >/dev/null || FAIL "example seed 7"
out=$( (ulimit -f 64; trap '' XFSZ; exec timeout 60 "$DT" shard-weights "$t/m.dt" --weights "$t/w2.safetensors"         --mesh 4 --plan "$PLAN" -o "$t/shards") 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "cannot write" || FAIL "a save over the file size limit: $out"
diff -r -x .dtensor-lock "$t/shards" "$t/shards.orig" >/dev/null || FAIL "a failed save changed the checkpoint: $(ls -A "$t/shards")"
no_temporaries "$t/shards"

# Outputs that are inputs are refused (compile -o, run --trace), example outputs must differ.
cp "$t/m.dt" "$t/m.orig"
expect 2 "is the same file as model" compile "$t/m.dt" --mesh 2 --plan "$PLAN" --rank 0 -o "$t/m.dt"
cmp -s "$t/m.dt" "$t/m.orig" || FAIL "compile -o overwrote its model"
expect 2 "is the same file as weights" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --mesh 2 --plan "$PLAN" --trace "$t/w.safetensors"
cmp -s "$t/w.safetensors" "$t/w.orig" || FAIL "run --trace overwrote the weights"
expect 2 "twice in one command" example mlp -o "$t/same" --weights "$t/same"
[ -e "$t/same" ] && FAIL "example wrote $t/same although it failed"

# 3. Sizes are checked before anything is written.
expect 2 "memory" example gpt --hidden 1000000 -o "$t/big.dt" --weights "$t/big.safetensors"
[ -e "$t/big.dt" ] && FAIL "example wrote big.dt before failing"
[ -e "$t/big.safetensors" ] && FAIL "example wrote big.safetensors before failing"
no_temporaries "$t"

# 4. --timeout-s: finite, positive, bounded.
for bad in inf nan 1e10 0 -1; do
  expect 2 "--timeout-s must be a number of seconds in (0, 1000000]" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --mesh 2 --plan "$PLAN" --timeout-s "$bad"
done
expect 0 "match" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --mesh 2 --plan "$PLAN" --timeout-s 1e6

# 5. Meshes the model or dtensor cannot take are user errors.
expect 2 "more than the limit of 8" compile "$t/m.dt" --mesh 1x1x1x1x1x1x1x1x2 --plan "$PLAN"
expect 2 "more than 65536 ranks" compile "$t/m.dt" --mesh 99999999999 --plan "$PLAN"
expect 2 "ranks" compile "$t/m.dt" --mesh 513 --plan "$PLAN"

# 7. A FIFO as the model, weights or plan is refused at once.
mkfifo "$t/fifo"
expect 2 "is not a regular file (a fifo)" run "$t/fifo" --weights "$t/w.safetensors" --inputs "$t/in.safetensors"
expect 2 "is not a regular file (a fifo)" run "$t/m.dt" --weights "$t/fifo" --inputs "$t/in.safetensors"
expect 2 "is not a regular file (a fifo)" compile "$t/m.dt" --mesh 2 --plan "$t/fifo"

# An IR file whose shapes do not agree: the inference error (a ShapeError, located by the verifier)
# is a user error like a syntax error: exit 2, one line, file:line:col.
printf 'graph t {\n  input %%x : f32[8, 64]\n  param %%w : f32[256, 64]\n  %%y = matmul(%%x, %%w) : f32[8, 64]\n  return %%y\n}\n' > "$t/bad_shape.dt"
expect 2 "bad_shape.dt:4:8: matmul inner dims differ: f32[8, 64] x f32[256, 64]" compile "$t/bad_shape.dt" --mesh 2 --plan "$PLAN"
printf 'graph t {\n  input %%x : f32[8, 64]\n  %%y = relu(%%x) : f32[8, 64] $\n' > "$t/bad_syntax.dt"
expect 2 "bad_syntax.dt:3:30: unexpected character '\$'" compile "$t/bad_syntax.dt" --mesh 2 --plan "$PLAN"

# Command-line parse errors exit 2 with one line; --help and --version exit 0.
expect 2 "model is required" run
expect 2 "--bogus" run "$t/m.dt" --bogus
expect 2 "error" --mesh 4
expect 0 "Usage" --help
expect 0 "Usage" compile --help
expect 0 "dtensor" --version

# Issue 29.2: a checkpoint holding a rank file of another save (same mesh and plan), or a file
# with 64 bytes overwritten, is refused; so is a directory of rank files without a manifest.
expect 0 "4 ranks" shard-weights "$t/m.dt" --weights "$t/w.safetensors" --mesh 4 --plan "$PLAN" -o "$t/ckA"
expect 0 "4 ranks" shard-weights "$t/m.dt" --weights "$t/w2.safetensors" --mesh 4 --plan "$PLAN" -o "$t/ckB"
cp -r "$t/ckA" "$t/mixed"
cp "$t/ckB"/gen-*/rank1.safetensors "$t/mixed"/gen-*/rank1.safetensors
expect 2 "does not match the hash in the checkpoint manifest" run "$t/m.dt" --weights "$t/mixed"   --inputs "$t/in.safetensors" --mesh 4 --plan "$PLAN"
cp -r "$t/ckA" "$t/corrupt"
f=$(ls "$t/corrupt"/gen-*/rank3.safetensors)
printf '\xff%.0s' $(seq 64) | dd of="$f" bs=1 seek=4096 conv=notrunc status=none
expect 2 "does not match the hash" run "$t/m.dt" --weights "$t/corrupt" --inputs "$t/in.safetensors" --mesh 4 --plan "$PLAN"
expect 2 "does not match the hash" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --expect "$t/corrupt"
mkdir -p "$t/legacy" && cp "$t/ckA"/gen-*/rank*.safetensors "$t/legacy/"
expect 2 "an older dtensor's format" run "$t/m.dt" --weights "$t/legacy" --inputs "$t/in.safetensors" --mesh 4 --plan "$PLAN"

# Issue 29.13: an output that is a symbolic link is refused (the link's target, a decoy here, is
# untouched) unless DTENSOR_FOLLOW_SYMLINKS=1; then the target is replaced and the link kept.
echo decoy > "$t/decoy"
ln -s "$t/decoy" "$t/link.dt"
expect 2 "is a symbolic link" example mlp -o "$t/link.dt"
[ "$(cat "$t/decoy")" = decoy ] || FAIL "example -o through a symlink replaced its target"
[ -L "$t/link.dt" ] || FAIL "the symlink was removed"
DTENSOR_FOLLOW_SYMLINKS=1 timeout 60 "$DT" example mlp -o "$t/link.dt" >/dev/null 2>&1 || FAIL "DTENSOR_FOLLOW_SYMLINKS=1"
grep -q "graph" "$t/decoy" && [ -L "$t/link.dt" ] || FAIL "DTENSOR_FOLLOW_SYMLINKS=1 did not write the target through the kept link"

# Issue 29.12: option values that used to be accepted or misreported.
for cap in inf 1e30 nan; do
  expect 2 "is not a number of MiB in (0, 1048576]" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" \
    --mesh 2 --plan "$PLAN" --bucket-cap-mb "$cap"
done
# The tp-overlap flags (issue 33): a bad mode or chunk count, and the flag without a mesh; the pass
# log names the decision of every rowwise all_reduce.
expect 2 "not in {auto,on,off}" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" \
  --mesh 2 --plan "$PLAN" --tp-overlap sometimes
expect 2 "not in range" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" \
  --mesh 2 --plan "$PLAN" --tp-overlap-chunks -1
expect 2 "applies to sharded runs only" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --tp-overlap on
expect 0 "tp-overlap: h.0.out.ar" compile "$t/m.dt" --mesh 2 --plan "$PLAN" --rank 0 -o "$t/c.dt" --pass-log
expect 2 "finite --alpha-us" plan --mesh 4 --shape 8 --from 'S(0)' --to R --alpha-us nan
expect 2 "finite --alpha-us" plan --mesh 4 --shape 8 --from 'S(0)' --to R --beta-gbs inf
expect 2 "--repeat must be >= 1, got -5" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --repeat -5
expect 2 "got 1000001" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --mesh 2 --plan "$PLAN" \
  --timeout-s 1000001
cp "$PLAN" "$t/nul_plan.json" && printf '\0junk' >> "$t/nul_plan.json"
expect 2 "a NUL byte" compile "$t/m.dt" --mesh 2 --plan "$t/nul_plan.json" --rank 0 -o "$t/c.dt"

# Issue 29.9: limits are user errors naming the limit, not internal errors.
python3 - "$t/rank33.dt" <<'PY'
import sys
dims = ", ".join(["1"] * 33)
open(sys.argv[1], "w").write(f"graph g {{\n  input %x : f32[{dims}]\n  %y = relu(%x) : f32[{dims}]\n  return %y\n}}\n")
PY
expect 2 "more than the limit of 32" compile "$t/rank33.dt" --mesh 2 --plan "$PLAN" --rank 0 -o "$t/c.dt"
cat > "$t/mul4.dt" <<'EOF'
graph g {
  input %x : f32[4, 4, 4, 4]
  param %w : f32[4, 4, 4, 4]
  %y = mul(%x, %w) : f32[4, 4, 4, 4]
  return %y
}
EOF
echo '{"mesh_dims": ["a","b","c","d","e","f","g","h"], "inputs": {"x": {"a": "S(0)", "b": "S(0)"}}}' > "$t/p8.json"
expect 2 "not even replicated" compile "$t/mul4.dt" --mesh 2x2x2x2x2x2x2x2 --plan "$t/p8.json" --rank 0 -o "$t/c.dt"
expect 2 "more than the limit of 1 GiB" plan --mesh 4 --shape 1099511627776 --from 'S(0)' --to R --verify

# Issue 29.10: threads that cannot be created (address space capped) are a clear error, exit 2.
out=$( (ulimit -v 2000000; exec timeout 120 "$DT" run "$t/m.dt" --weights "$t/w.safetensors" \
  --inputs "$t/in.safetensors" --mesh 256 --plan "$PLAN") 2>&1)
status=$?
[ $status -eq 2 ] || [ $status -eq 0 ] || FAIL "run --mesh 256 under ulimit -v: exit $status: $(echo "$out" | tail -2)"
echo "$out" | grep -q "terminate called\|internal error" && FAIL "run --mesh 256 under ulimit -v: $(echo "$out" | tail -2)"

finish
