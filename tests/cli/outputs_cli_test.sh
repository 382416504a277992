#!/usr/bin/env bash
# End-to-end tests of what `dtensor run` gives a user back (issue 18): saved outputs equal the
# reported ones and round-trip through --expect (one device and sharded), --expect compares each
# output it names, non-finite outputs are reported as such, per-rank outputs (--sharded) round-trip,
# --trace records a single-device run, options that cannot apply are errors, and `example` names
# every file it wrote. Every command runs under `timeout`.
# Usage: outputs_cli_test.sh path/to/dtensor path/to/source
set -u
DT="$1"
SRC="$2"
source "$(dirname "$0")/../cli_test_lib.sh"
run() { timeout 300 "$DT" "$@" 2>&1; }

# example names the model, the weights and the inputs it wrote (hidden 512, 8 heads, vocab 1000).
out=$(run example gpt --hidden 512 --heads 8 --layers 1 --vocab 1000 --loss -o "$t/m.dt" --weights "$t/w.safetensors" \
      --inputs "$t/in.safetensors")
for f in "model $t/m.dt" "weights $t/w.safetensors" "inputs $t/in.safetensors"; do
  echo "$out" | grep -qF "wrote $f" || FAIL "example does not name '$f': $out"
done

# One device: every output saved under its name; --expect with that file matches each output.
out=$(run run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --save-outputs "$t/o1.safetensors")
[ $? -eq 0 ] || FAIL "run --save-outputs: $out"
echo "$out" | grep -qE '^output %loss : f32\[\] = [0-9.]+$' || FAIL "scalar loss value not printed: $out"
out=$(run run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --expect "$t/o1.safetensors" --json)
[ $? -eq 0 ] || FAIL "--expect with saved outputs: $out"
n=$(echo "$out" | grep -c '"match": true')
[ "$n" -ge 3 ] || FAIL "every output and the run should match ($n matches): $out"

# Sharded (tp 4, vocab 1000 over 4 and 8 heads): outputs gathered to full tensors equal the
# single-device ones; the loss is printed.
out=$(run run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --mesh 4 \
      --plan "$SRC/examples/gpt_tp_vocab.json" --save-outputs "$t/o4.safetensors" --expect "$t/o1.safetensors")
[ $? -eq 0 ] || FAIL "sharded run --save-outputs --expect: $out"
echo "$out" | grep -qE '^output %loss : f32\[\] = [0-9.]+; max_abs_diff' || FAIL "sharded loss not printed: $out"
echo "$out" | grep -q ': match$' || FAIL "sharded outputs do not match the saved single-device ones: $out"
out=$(run run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --expect "$t/o4.safetensors")
[ $? -eq 0 ] || FAIL "single-device run against the sharded saved outputs: $out"

# --expect naming none of the outputs: a clear error.
out=$(run run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --expect "$t/w.safetensors")
[ $? -eq 2 ] && echo "$out" | grep -q "names none of the model's outputs" || FAIL "--expect without outputs: $out"

# A NaN weight: the outputs are reported as non-finite (count, first index), exit 1, not "inf".
python3 - "$t/w.safetensors" "$t/wnan.safetensors" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
start = header["ln_f.weight"]["data_offsets"][0] + 8 + n
out = bytearray(data)
out[start:start + 4] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(bytes(out))
PY
out=$(run run "$t/m.dt" --weights "$t/wnan.safetensors" --inputs "$t/in.safetensors" --expect "$t/o1.safetensors")
[ $? -eq 1 ] || FAIL "NaN weight: exit status (want 1): $out"
echo "$out" | grep -qE 'output %logits : .*non-finite values \(first: nan at \[0, 0, [0-9]+\]\)' || FAIL "no non-finite report: $out"
echo "$out" | grep -q "max_abs_diff inf" && FAIL "NaN reported as an infinite difference: $out"
out=$(run run "$t/m.dt" --weights "$t/wnan.safetensors" --inputs "$t/in.safetensors" --json)
echo "$out" | grep -q '"non_finite"' || FAIL "no non_finite in --json: $out"

# --save-outputs DIR --sharded: one file per rank with that rank's local outputs and their
# placements (the plan keeps the logits vocabulary-sharded); --expect DIR assembles them, and they
# equal the single-device outputs and, bitwise, a second sharded run's.
python3 - "$SRC/examples/gpt_tp_vocab.json" "$t/plan_sharded_out.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
plan["outputs"] = {"logits": {"tp": "S(2)"}}
json.dump(plan, open(sys.argv[2], "w"))
PY
out=$(run run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --mesh 4 \
      --plan "$t/plan_sharded_out.json" --save-outputs "$t/od" --sharded)
[ $? -eq 0 ] || FAIL "run --save-outputs DIR --sharded: $out"
# A sharded checkpoint (io/sharded_checkpoint.h): checkpoint.json names the generation directory.
gen=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["generation"])' "$t/od/checkpoint.json")
for r in 0 1 2 3; do [ -f "$t/od/$gen/rank$r.safetensors" ] || FAIL "no rank$r.safetensors in $t/od/$gen"; done
python3 - "$t/od/$gen/rank1.safetensors" <<'PY' || FAIL "rank file does not hold rank 1's shard with its placements"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
h = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])
meta = h["__metadata__"]
assert meta["rank"] == "1" and meta["mesh"] == "4", meta
assert meta["placements.logits"] == "S(2)", meta  # vocab 1000 sharded over 4: 250 each
assert h["logits"]["shape"] == [2, 32, 250], h["logits"]
assert meta["shape.logits"] == "2,32,1000", meta
PY
out=$(run run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --expect "$t/od")
[ $? -eq 0 ] || FAIL "single-device run against the per-rank saved outputs: $out"
out=$(run run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --mesh 4 \
      --plan "$t/plan_sharded_out.json" --expect "$t/od" --rtol 0 --atol 0)
[ $? -eq 0 ] || FAIL "sharded run against its own per-rank saved outputs (bitwise): $out"

# --trace on one device: one track of every node.
out=$(run run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --trace "$t/tr1.json")
[ $? -eq 0 ] || FAIL "--trace on one device: $out"
python3 - "$t/tr1.json" "$t/m.dt" <<'PY' || FAIL "single-device trace"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
nodes = sum(1 for l in open(sys.argv[2]) if l.strip().startswith("%"))
x = [e for e in ev if e["ph"] == "X"]
assert {e["tid"] for e in ev} == {0}, "one track"
assert len(x) == nodes, (len(x), nodes)
PY

# Options that cannot apply are errors, never ignored: each flag that only a sharded run reads.
for flag in "--passes none" "--bucket-cap-mb 1" "--one-shot-threshold 0" "--memory-budget 1" "--no-check-ranks" \
            "--no-comm-arena" "--check-collectives" "--timeout-s 5" "--backend threads"; do
  out=$(run run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" $flag)
  [ $? -eq 2 ] && echo "$out" | grep -qF -- "${flag%% *} applies to sharded runs only" || FAIL "run $flag without --mesh: $out"
done
out=$(run run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --mesh 4 \
      --plan "$SRC/examples/gpt_tp_vocab.json" --sharded)
[ $? -eq 2 ] && echo "$out" | grep -q "add --save-outputs DIR" || FAIL "--sharded without --save-outputs: $out"
for flag in "--passes none" "--backend threads"; do
  out=$(run train "$t/m.dt" --weights "$t/w.safetensors" --data "$t/in.safetensors" $flag)
  [ $? -eq 2 ] && echo "$out" | grep -qF -- "${flag%% *} applies to sharded training only" || FAIL "train $flag: $out"
done
out=$(run run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --save-outputs "$t/w.safetensors")
[ $? -eq 2 ] || FAIL "--save-outputs over the weights accepted: $out"
# Each other option that only some runs read: an error naming it where it cannot apply.
expect_refused() {  # expect_refused "message" dtensor-args...
  local msg="$1"; shift
  local o; o=$(run "$@")
  [ $? -eq 2 ] && echo "$o" | grep -qF -- "$msg" || FAIL "$* accepted or wrong message (want '$msg'): $o"
}
expect_refused "--rtol is the tolerance of a comparison: add --expect" \
  run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --rtol 1e-3
expect_refused "--atol is the tolerance of a comparison" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --atol 1
expect_refused "--momentum applies to --optimizer sgd only" \
  train "$t/m.dt" --weights "$t/w.safetensors" --data "$t/in.safetensors" --optimizer adamw --momentum 0.9
expect_refused "--beta1 applies to --optimizer adamw only" \
  train "$t/m.dt" --weights "$t/w.safetensors" --data "$t/in.safetensors" --beta1 0.8
expect_refused "--eps applies to --optimizer adamw only" train "$t/m.dt" --weights "$t/w.safetensors" --data "$t/in.safetensors" --eps 1e-6
expect_refused "--output writes the programs" compile "$t/m.dt" --mesh 2 --plan "$SRC/examples/gpt_tp.json" --report -o "$t/p.dt"
[ -e "$t/p.dt" ] || [ -e "$t/p.rank0.dt" ] && FAIL "compile -o --report wrote a program"
expect_refused "--seed seeds the --verify data: add --verify" plan --mesh 2 --shape 4x4 --from 'S(0)' --to R --seed 3
expect_refused "--seed seeds the random weights and inputs" example gpt --seed 3
# An unknown command is named with the known ones (CLI11 alone says "A subcommand is required"),
# also below `bench` and `checkpoint`; --plan without --mesh would have run as one device.
expect_refused "unknown command 'bogus': dtensor has" bogus
expect_refused "unknown command 'bogus': dtensor bench has" bench bogus
expect_refused "unknown command 'bogus': dtensor checkpoint has consolidate, reshard" checkpoint bogus
expect_refused "--plan needs --mesh" run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" \
  --plan "$SRC/examples/gpt_tp.json"

finish
