#!/usr/bin/env bash
# End-to-end test of `dtensor import` (docs/import.md) on PyTorch's exports (tests/reference/onnx):
# - gpt.onnx and llama.onnx import with --input-shape input_ids=2x8, run on one device matching
#   PyTorch (--expect, rtol/atol 1e-5) and with the plans beside them: tp on 4 ranks, sp on 3,
#   fsdp x tp on 2x2;
# - the written model parses (compile reads it) and the weights hold the module-path names;
# - clear errors, exit 2, nothing written: a truncated file, a dynamic dim without --input-shape,
#   bad --input-shape text, an --input-shape naming no input, an unsupported op, -o over the model;
# - onnx-conformance: --filter, --json, and its bad options (exit 2).
# Usage: import_cli_test.sh path/to/dtensor path/to/source
set -u
DT="$1"
SRC="$2"
R="$SRC/tests/reference/onnx"
source "$(dirname "$0")/../cli_test_lib.sh"

for m in gpt llama; do
  out=$("$DT" import "$R/$m.onnx" -o "$t/$m.dt" --weights "$t/$m.safetensors" --input-shape input_ids=2x8 2>&1) ||
    FAIL "import $m: $out"
  out=$("$DT" run "$t/$m.dt" --weights "$t/$m.safetensors" --inputs "$R/${m}_io.safetensors" \
    --expect "$R/${m}_io.safetensors" 2>&1) || FAIL "$m one device: $out"
  out=$("$DT" run "$t/$m.dt" --weights "$t/$m.safetensors" --inputs "$R/${m}_io.safetensors" \
    --expect "$R/${m}_io.safetensors" --mesh 4 --plan "$R/${m}_tp.json" 2>&1) || FAIL "$m tp 4: $out"
  out=$("$DT" run "$t/$m.dt" --weights "$t/$m.safetensors" --inputs "$R/${m}_io.safetensors" \
    --expect "$R/${m}_io.safetensors" --mesh 3 --plan "$R/${m}_sp.json" 2>&1) || FAIL "$m sp 3: $out"
  out=$("$DT" run "$t/$m.dt" --weights "$t/$m.safetensors" --inputs "$R/${m}_io.safetensors" \
    --expect "$R/${m}_io.safetensors" --mesh 2x2 --plan "$R/${m}_fsdp_tp.json" 2>&1) || FAIL "$m fsdp_tp 2x2: $out"
done
grep -q "param %h.0.attn.q_proj.weight : f32\[64, 64\]" "$t/gpt.dt" || FAIL "gpt.dt lacks the q_proj parameter"
grep -q "linear(.*%layers.0.self_attn.k_proj.weight) : f32\[2, 8, 16\]" "$t/llama.dt" || FAIL "llama.dt lacks k_proj as linear"
grep -q "scaled_dot_product_attention(.*) {causal = true} : f32\[2, 8, 8, 8\]" "$t/llama.dt" || FAIL "llama.dt's attention is not fused"
grep -q "rms_norm(.*%layers.0.input_layernorm.weight)" "$t/llama.dt" || FAIL "llama.dt's RMSNorm is not fused"

# expect_error <label> <text the message must contain> <command...>: exit 2, one-line message.
expect_error() {
  local label="$1" want="$2"
  shift 2
  out=$("$@" 2>&1)
  code=$?
  [ "$code" = 2 ] || FAIL "$label: exit $code, expected 2 ($out)"
  echo "$out" | grep -q -- "$want" || FAIL "$label: message lacks '$want': $out"
}
head -c 5000 "$R/gpt.onnx" >"$t/cut.onnx"
expect_error "truncated" "not a valid ONNX model" "$DT" import "$t/cut.onnx" -o "$t/x.dt" --weights "$t/x.safetensors"
expect_error "dynamic dim" "dim 0 is dynamic ('batch'): give its shape with --input-shape input_ids=" \
  "$DT" import "$R/gpt.onnx" -o "$t/x.dt" --weights "$t/x.safetensors"
expect_error "bad shape text" "is not a shape like 2x32" \
  "$DT" import "$R/gpt.onnx" -o "$t/x.dt" --weights "$t/x.safetensors" --input-shape input_ids=2by8
expect_error "wrong name" "'ids', which is not a graph input (inputs: input_ids)" \
  "$DT" import "$R/gpt.onnx" -o "$t/x.dt" --weights "$t/x.safetensors" --input-shape ids=2x8
# An op the importer does not convert (GRU, from the conformance data).
expect_error "unsupported op" "node #0 (GRU, output 'Y_h'): op GRU is not supported by the importer" \
  "$DT" import /usr/share/libonnx-testdata/data/node/test_gru_defaults/model.onnx -o "$t/x.dt" --weights "$t/x.safetensors"
cp "$R/gpt.onnx" "$t/copy.onnx"
expect_error "output over input" "same file" \
  "$DT" import "$t/copy.onnx" -o "$t/copy.onnx" --weights "$t/x.safetensors" --input-shape input_ids=2x8
[ ! -e "$t/x.dt" ] && [ ! -e "$t/x.safetensors" ] || FAIL "a failed import wrote files"
cmp -s "$R/gpt.onnx" "$t/copy.onnx" || FAIL "the model was modified"

# Hugging Face-style exports (default options): the summary line, consts in the .dt, parameters
# named after their modules although the export was constant-folded.
out=$("$DT" import "$R/hf_llama.onnx" -o "$t/hf.dt" --weights "$t/hf.safetensors" --input-shape input_ids=2x8 2>&1) ||
  FAIL "import hf_llama: $out"
echo "$out" | grep -q "^fused: 2 attention, 5 rms_norm, 2 activation; frozen constants: [0-9]*; parameters: 21$" || FAIL "import summary: $out"
grep -q "^  param %layers.0.self_attn.q_proj.weight : f32\[32, 32\]" "$t/hf.dt" || FAIL "hf.dt lacks q_proj by its module name"
out=$("$DT" run "$t/hf.dt" --weights "$t/hf.safetensors" --inputs "$R/hf_llama_io.safetensors" \
  --expect "$R/hf_llama_io.safetensors" 2>&1) || FAIL "hf_llama one device: $out"
# Training an imported HF Llama: PyTorch's 5 SGD losses within 1e-6, its consts reported frozen.
out=$("$DT" import "$R/hf_llama_train.onnx" -o "$t/hft.dt" --weights "$t/hft.safetensors" 2>&1) || FAIL "import hf_llama_train: $out"
"$DT" train "$t/hft.dt" --weights "$t/hft.safetensors" --data "$R/hf_llama_train_io.safetensors" --steps 5 --lr 0.1 \
  --json >"$t/train.json" 2>&1 || FAIL "train hf_llama_train: $(cat "$t/train.json")"
python3 - "$t/train.json" "$R/hf_llama_train_io.safetensors" <<'PY' || FAIL "hf_llama_train losses"
import json, struct, sys
j = json.load(open(sys.argv[1]))
b = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])["losses"]
want = struct.unpack("<5d", b[8 + n + h["data_offsets"][0]:8 + n + h["data_offsets"][1]])
assert j["frozen"] == 3, j
assert all(abs(a - w) <= 1e-6 for a, w in zip(j["losses"], want)), (j["losses"], want)
PY
# Issue 27.6: a run's kernel error names its node (file:line:col and the statement): a token id
# past the vocabulary of an imported GPT-2, on one device and under tp 2.
out=$("$DT" import "$R/hf_gpt2.onnx" -o "$t/g2.dt" --weights "$t/g2.safetensors" \
  --input-shape input_ids=2x8 attention_mask=2x8 2>&1) || FAIL "import hf_gpt2: $out"
python3 - "$t/bad_ids.safetensors" <<'PY'
import json, struct, sys
ids = [0] * 16
ids[11] = 61  # the vocabulary has 61 tokens
mask = [1] * 16
h = {"input_ids": {"dtype": "I64", "shape": [2, 8], "data_offsets": [0, 128]},
     "attention_mask": {"dtype": "I64", "shape": [2, 8], "data_offsets": [128, 256]}}
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hb)) + hb + struct.pack("<16q", *ids) + struct.pack("<16q", *mask))
PY
echo '{"mesh_dims": ["tp"], "modules": [{"pattern": "h.*.c_fc", "style": "colwise", "mesh_dim": "tp"}]}' >"$t/c_fc_tp.json"
line=$(grep -n "= embedding(%input_ids, %wte.weight)" "$t/g2.dt" | cut -d: -f1)
# ... and the ONNX node it was made from, kept in the .dt as loc("...") (on one device and tp).
grep -q "= embedding(%input_ids, %wte.weight) : f32\[2, 8, 32\] loc(\"ONNX node '/wte/Gather' (Gather, output '/wte/Gather_output_0')\")$" "$t/g2.dt" ||
  FAIL "g2.dt lacks the embedding's ONNX node: $(grep '= embedding' "$t/g2.dt")"
onnx_node="(ONNX node '/wte/Gather' (Gather, output '/wte/Gather_output_0')): embedding index 61 out of range"
expect_error "kernel error names its node" "g2.dt:$line:8: node %7 = embedding(%input_ids, %wte.weight) : f32.2, 8, 32. $onnx_node" \
  "$DT" run "$t/g2.dt" --weights "$t/g2.safetensors" --inputs "$t/bad_ids.safetensors"
expect_error "kernel error names its node under tp" "= embedding(%input_ids, %wte.weight) : f32.2, 8, 32. $onnx_node" \
  "$DT" run "$t/g2.dt" --weights "$t/g2.safetensors" --inputs "$t/bad_ids.safetensors" --mesh 2 \
  --plan "$t/c_fc_tp.json"
# A malformed loc is a parse error naming its line.
sed "${line}s/ loc(\"/ loc(3 \"/" "$t/g2.dt" >"$t/badloc.dt"
expect_error "malformed loc" "badloc.dt:$line:.*: loc takes a string, found number 3" \
  "$DT" run "$t/badloc.dt" --weights "$t/g2.safetensors" --inputs "$t/bad_ids.safetensors"
sed "${line}s/ loc(\"/ lox(\"/" "$t/g2.dt" >"$t/badloc.dt"
expect_error "misspelt loc" "badloc.dt:$line:.*: expected loc(\"...\") or a new line after the result types, found 'lox'" \
  "$DT" run "$t/badloc.dt" --weights "$t/g2.safetensors" --inputs "$t/bad_ids.safetensors"

# Malformed models (the fuzz seeds of tests/fuzz/onnx): one line, exit 2.
F="$SRC/tests/fuzz/onnx"
expect_error "no outputs" "node 'n0' (Relu): the node has no outputs" \
  "$DT" import "$F/NodesWithoutOutputsOrWithWrongInputCountsAreRefused_0.onnx" -o "$t/x.dt" --weights "$t/x.safetensors"
expect_error "3 inputs" "3 inputs, but Relu at opset 17 takes 1" \
  "$DT" import "$F/NodesWithoutOutputsOrWithWrongInputCountsAreRefused_6.onnx" -o "$t/x.dt" --weights "$t/x.safetensors"
expect_error "dup output" "output 'y' is already defined" \
  "$DT" import "$F/NamesDefinedTwiceAreRefused_0.onnx" -o "$t/x.dt" --weights "$t/x.safetensors"
expect_error "raw and typed" "both raw_data and 3 typed values" \
  "$DT" import "$F/TensorPayloadsAndDimsAreChecked_0.onnx" -o "$t/x.dt" --weights "$t/x.safetensors"
expect_error "several unsupported" "3 ops are not supported by the importer" \
  "$DT" import "$F/EveryUnsupportedOpIsListedAndInferenceErrorsNameTheNode_0.onnx" -o "$t/x.dt" --weights "$t/x.safetensors"
expect_error "repeated --input-shape" "--input-shape gives input 'input_ids' twice" \
  "$DT" import "$R/gpt.onnx" -o "$t/x.dt" --weights "$t/x.safetensors" --input-shape input_ids=2x8 --input-shape input_ids=2x4

# onnx-conformance: --filter selects tests, --json is JSON, bad options are errors (exit 2).
out=$("$DT" onnx-conformance --filter '^test_relu$' 2>&1) || FAIL "conformance relu: $out"
echo "$out" | grep -q "1 node tests ran: 1 passed, 0 failed" || FAIL "conformance --filter: $out"
"$DT" onnx-conformance --filter '^test_softmax' --json | python3 -c 'import json, sys; j = json.load(sys.stdin); assert j["ops"]["Softmax"]["passed"] > 0 and j["totals"]["failed"] == 0, j["totals"]' ||
  FAIL "conformance --json"
expect_error "bad filter" "is not a regular expression" "$DT" onnx-conformance --filter '('
expect_error "no data" "is not a directory: give --data" "$DT" onnx-conformance --data "$t/none"

finish
