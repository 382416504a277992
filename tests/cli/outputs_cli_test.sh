#!/usr/bin/env bash
# End-to-end tests of what `dtensor run` gives a user back (issue 18): saved outputs equal the
# reported ones and round-trip through --expect (one device and sharded), --expect compares each
# output it names, non-finite outputs are reported as such, options that cannot apply are errors,
# and `example` names every file it wrote. Every command runs under `timeout`.
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

# Options that cannot apply are errors, never ignored.
out=$(run run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --trace "$t/tr.json")
[ $? -eq 2 ] && echo "$out" | grep -q "add --mesh" || FAIL "--trace without --mesh accepted: $out"
[ -e "$t/tr.json" ] && FAIL "--trace without --mesh wrote a file"
out=$(run run "$t/m.dt" --weights "$t/w.safetensors" --inputs "$t/in.safetensors" --save-outputs "$t/w.safetensors")
[ $? -eq 2 ] || FAIL "--save-outputs over the weights accepted: $out"

finish
