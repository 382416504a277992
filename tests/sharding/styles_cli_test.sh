#!/usr/bin/env bash
# End-to-end tests of the parallel styles through the CLI (docs/plans.md):
# - the flagship command of the styles issue: gpt hidden 512 on 2x2 with the fsdp x tp plan runs
#   and matches (it failed with a collective mismatch before programs were proven rank-consistent);
# - a sharded checkpoint round-trips: `shard-weights` on 4x2 fsdp x tp writes the strided rows
#   (PyTorch's FSDP2-over-TP layout) and `run --weights DIR` loads them and matches; a directory
#   sharded with another plan or mesh is resharded and matches; a directory missing a rank's file
#   is refused with a clear error;
# - the sequence-parallel and vocabulary-parallel example plans run and match on 3 and 4 ranks;
# - `compile --report --json` lists a warning naming the node when heads do not divide the mesh.
# Usage: styles_cli_test.sh path/to/dtensor path/to/source
set -u
DT="$1"
SRC="$2"
source "$(dirname "$0")/../cli_test_lib.sh"
run_ok() {  # run_ok <label> <args...>: exit 0 and ": match"
  local out
  out=$(timeout 300 "$DT" "$@" 2>&1)
  [ $? -eq 0 ] || FAIL "$1: exit $?: $(echo "$out" | tail -3)"
  echo "$out" | grep -q ': match$' || FAIL "$*: no match: $(echo "$out" | tail -3)"
}

"$DT" example gpt --hidden 512 --heads 8 --layers 1 -o "$t/h512.dt" --weights "$t/w.safetensors" \
  --inputs "$t/i.safetensors" >/dev/null 2>&1 || FAIL "example"
run_ok run "$t/h512.dt" --weights "$t/w.safetensors" --inputs "$t/i.safetensors" --mesh 2x2 \
  --plan "$SRC/examples/gpt_fsdp_tp.json"
for mesh in 3 4; do
  for plan in gpt_sp gpt_tp_vocab; do
    run_ok run "$t/h512.dt" --weights "$t/w.safetensors" --inputs "$t/i.safetensors" --mesh $mesh \
      --plan "$SRC/examples/$plan.json"
  done
done

# Sharded checkpoint round trip (strided rows on 4x2).
"$DT" shard-weights "$t/h512.dt" --weights "$t/w.safetensors" --mesh 4x2 --plan "$SRC/examples/gpt_fsdp_tp.json" \
  -o "$t/ckpt" >/dev/null || FAIL "shard-weights"
run_ok run "$t/h512.dt" --weights "$t/ckpt" --inputs "$t/i.safetensors" --mesh 4x2 --plan "$SRC/examples/gpt_fsdp_tp.json"
# The same tp styles without fsdp: a 2-d plan whose placements differ from the checkpoint's. The
# checkpoint is resharded (assembled and cut again for this plan), on its own mesh and on another.
sed 's/"mesh_dims": \["tp"\]/"mesh_dims": ["dp", "tp"]/' "$SRC/examples/gpt_tp.json" > "$t/tp2d.json"
run_ok run "$t/h512.dt" --weights "$t/ckpt" --inputs "$t/i.safetensors" --mesh 4x2 --plan "$t/tp2d.json"
run_ok run "$t/h512.dt" --weights "$t/ckpt" --inputs "$t/i.safetensors" --mesh 2x2 \
  --plan "$SRC/examples/gpt_fsdp_tp.json"
# shard-weights reshards a checkpoint into another one (tp 2 from fsdp x tp 4x2).
"$DT" shard-weights "$t/h512.dt" --weights "$t/ckpt" --mesh 2 --plan "$SRC/examples/gpt_tp.json" -o "$t/ckpt2" \
  >/dev/null || FAIL "shard-weights of a checkpoint"
run_ok run "$t/h512.dt" --weights "$t/ckpt2" --inputs "$t/i.safetensors" --mesh 2 --plan "$SRC/examples/gpt_tp.json"
# A checkpoint missing a rank's file is refused with exit 2, naming the directory.
cp -r "$t/ckpt2" "$t/ckpt_broken"
find "$t/ckpt_broken" -name 'rank1*.safetensors' -delete
out=$(timeout 60 "$DT" run "$t/h512.dt" --weights "$t/ckpt_broken" --inputs "$t/i.safetensors" --mesh 2 \
  --plan "$SRC/examples/gpt_tp.json" 2>&1)
[ $? -eq 2 ] || FAIL "a checkpoint without rank 1's file was not refused with exit 2: $out"
echo "$out" | grep -q "ckpt_broken" || FAIL "the refusal does not name the checkpoint: $out"

# 6 heads over 4 ranks: the head split is given up, with a warning naming the view.
"$DT" example gpt --hidden 384 --heads 6 --layers 1 -o "$t/h6.dt" >/dev/null 2>&1 || FAIL "example heads 6"
json=$("$DT" compile "$t/h6.dt" --mesh 4 --plan "$SRC/examples/gpt_tp.json" --report --json 2>/dev/null)
echo "$json" | grep -q '(view): operand' || FAIL "no warning naming the view in --report --json: $(echo "$json" | grep -A3 warnings)"

finish
