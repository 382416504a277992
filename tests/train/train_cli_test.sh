#!/usr/bin/env bash
# End-to-end tests of `dtensor train` (docs/training.md) at realistic sizes:
# - gpt hidden 512, 8 heads, vocabulary 1000 (which no mesh here divides): 3 SGD steps on one device,
#   then sharded on 2x2 fsdp x tp, on 3 ranks tp (8 heads do not divide 3: heads stay whole),
#   sequence parallel on 4 and vocabulary parallel on 3 give the same losses within 1e-4 relative;
# - --save then resume: 2 steps + 1 resumed step reproduce the 3rd step of a 3-step run (momentum),
#   from one file and from a sharded checkpoint (2x2, one file per rank, which `run` loads too);
# - checkpoint consolidate / reshard: the checkpoint as one file, or on tp 2, resumes to that step;
# - --grads-out writes a gradient for every parameter, named like the weights;
# - --recompute blocks: the single-device losses unchanged, sequence parallel on 4 and 2x2 within 1e-4;
# - pipelines (examples/gpt_pp_dp_tp.json on 2x2x2): the single-device losses, --save DIR resumed on
#   the pipeline, on one device and consolidated, with --recompute blocks, `run`, `compile` (programs,
#   the training step's with --train, and per-stage report) and `profile` (per rank stage and bubble);
# - AdamW runs and lowers the loss; the text report names the files it wrote;
# - clear errors (exit 2): --steps 0, --mesh without --plan, a model without a scalar loss, --save
#   over an input, data of the wrong shape.
# Usage: train_cli_test.sh path/to/dtensor path/to/source
set -u
DT="$1"
SRC="$2"
source "$(dirname "$0")/../cli_test_lib.sh"

# losses <json>: prints the losses of a --json report, one per line.
losses() { echo "$1" | tr -d '\n ' | sed 's/.*"losses":\[\([^]]*\)\].*/\1/' | tr ',' '\n'; }
# same_losses <label> <json a> <json b> <rtol>
same_losses() {
  paste <(losses "$2") <(losses "$3") | awk -v rtol="$4" -v label="$1" '
    { n++; d = $1 - $2; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2; if (d > rtol * s) { bad = 1; print label ": step " n ": " $1 " vs " $2 } }
    END { if (n == 0) { print label ": no losses"; bad = 1 } exit bad }' || FAIL "$1 losses differ"
}

"$DT" example gpt --hidden 512 --heads 8 --layers 1 --vocab 1000 --batch 2 --seq 32 --loss -o "$t/gpt.dt" \
  --weights "$t/w.safetensors" --inputs "$t/d.safetensors" >/dev/null 2>&1 || FAIL "example gpt"
single=$(timeout 600 "$DT" train "$t/gpt.dt" --weights "$t/w.safetensors" --data "$t/d.safetensors" --steps 3 --json 2>&1) ||
  FAIL "single-device train: $single"
fsdp_tp=$(timeout 600 "$DT" train "$t/gpt.dt" --weights "$t/w.safetensors" --data "$t/d.safetensors" --steps 3 --json \
  --mesh 2x2 --plan "$SRC/examples/gpt_fsdp_tp.json" 2>&1) || FAIL "2x2 fsdp x tp train: $fsdp_tp"
same_losses "2x2 fsdp x tp" "$fsdp_tp" "$single" 1e-4
tp3=$(timeout 600 "$DT" train "$t/gpt.dt" --weights "$t/w.safetensors" --data "$t/d.safetensors" --steps 3 --json \
  --mesh 3 --plan "$SRC/examples/gpt_tp.json" 2>&1) || FAIL "tp 3 train: $tp3"
same_losses "tp 3" "$tp3" "$single" 1e-4
for case in "gpt_sp 4" "gpt_tp_vocab 3"; do
  set -- $case
  out=$(timeout 600 "$DT" train "$t/gpt.dt" --weights "$t/w.safetensors" --data "$t/d.safetensors" --steps 3 --json \
    --mesh "$2" --plan "$SRC/examples/$1.json" 2>&1) || FAIL "$1 on $2: $out"
  same_losses "$1 on $2" "$out" "$single" 1e-4
done
# --recompute blocks: bitwise the same losses on one device; sequence parallel on 4 and fsdp x tp
# on 2x2 (default passes) within 1e-4 of the single-device run.
out=$(timeout 600 "$DT" train "$t/gpt.dt" --weights "$t/w.safetensors" --data "$t/d.safetensors" --steps 3 --json \
  --recompute blocks 2>&1) || FAIL "single-device --recompute blocks: $out"
[ "$(losses "$out")" = "$(losses "$single")" ] || FAIL "--recompute blocks changed the single-device losses"
for case in "gpt_sp 4" "gpt_fsdp_tp 2x2"; do
  set -- $case
  out=$(timeout 600 "$DT" train "$t/gpt.dt" --weights "$t/w.safetensors" --data "$t/d.safetensors" --steps 3 --json \
    --mesh "$2" --plan "$SRC/examples/$1.json" --recompute blocks 2>&1) || FAIL "$1 on $2 --recompute blocks: $out"
  same_losses "$1 on $2 --recompute blocks" "$out" "$single" 1e-4
done
first=$(losses "$single" | head -1)
last=$(losses "$single" | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || FAIL "SGD did not lower the loss: $first -> $last"

# near <a> <b> <rtol>: |a - b| <= rtol * |a| (a resumed step against the uninterrupted run's).
near() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= r * (a < 0 ? -a : a)) }'; }
# resumes_to_step3 <label> <rtol> <weights> [train args...]: one momentum step from <weights> gives
# the uninterrupted run's 3rd loss ($third).
resumes_to_step3() {
  local label="$1" rtol="$2" weights="$3" resumed again
  shift 3
  resumed=$("$DT" train "$t/gpt.dt" --weights "$weights" --data "$t/d.safetensors" --steps 1 --momentum 0.9 --lr 0.05 \
    --json "$@" 2>&1) || FAIL "resume from $label: $resumed"
  again=$(losses "$resumed" | head -1)
  near "$third" "$again" "$rtol" || FAIL "step resumed from $label $again differs from step 3 $third"
}

# Save and resume with momentum.
"$DT" train "$t/gpt.dt" --weights "$t/w.safetensors" --data "$t/d.safetensors" --steps 3 --momentum 0.9 --lr 0.05 \
  --json > "$t/three.json" 2>&1 || FAIL "3 momentum steps: $(cat "$t/three.json")"
out=$("$DT" train "$t/gpt.dt" --weights "$t/w.safetensors" --data "$t/d.safetensors" --steps 2 --momentum 0.9 --lr 0.05 \
  --save "$t/ckpt.safetensors" 2>&1) || FAIL "2 steps with --save: $out"
echo "$out" | grep -q "wrote trained weights and optimizer state to $t/ckpt.safetensors" || FAIL "--save not reported: $out"
third=$(losses "$(cat "$t/three.json")" | sed -n 3p)
resumes_to_step3 "one file" 1e-6 "$t/ckpt.safetensors"
grep -aq "momentum_buffer" "$t/ckpt.safetensors" || FAIL "the checkpoint holds no momentum buffers"
# The same with a sharded checkpoint (one file per rank) on 2x2 fsdp x tp, which `run` loads too.
out=$("$DT" train "$t/gpt.dt" --weights "$t/w.safetensors" --data "$t/d.safetensors" --steps 2 --momentum 0.9 --lr 0.05 \
  --mesh 2x2 --plan "$SRC/examples/gpt_fsdp_tp.json" --save "$t/ckdir" 2>&1) || FAIL "sharded --save: $out"
ls "$t/ckdir"/gen-*/rank3.safetensors >/dev/null 2>&1 && [ -f "$t/ckdir/checkpoint.json" ] ||
  FAIL "sharded --save wrote no checkpoint (checkpoint.json, gen-*/rank3.safetensors)"
resumes_to_step3 shards 1e-4 "$t/ckdir" --mesh 2x2 --plan "$SRC/examples/gpt_fsdp_tp.json"
out=$("$DT" run "$t/gpt.dt" --weights "$t/ckdir" --inputs "$t/d.safetensors" --mesh 2x2 \
  --plan "$SRC/examples/gpt_fsdp_tp.json" 2>&1) || FAIL "run from the training shards: $out"
echo "$out" | grep -q ': match$' || FAIL "run from the training shards does not match: $(echo "$out" | tail -2)"

# checkpoint consolidate: the sharded checkpoint as one file of full tensors, which resumes to the
# same step; checkpoint reshard: the same checkpoint on tp 2 (momentum laid out like its
# parameter), which resumes there to the same step too.
out=$("$DT" checkpoint consolidate "$t/ckdir" -o "$t/consolidated.safetensors" 2>&1) || FAIL "consolidate: $out"
echo "$out" | grep -q "consolidated .* tensors" || FAIL "consolidate reported nothing: $out"
grep -aq "momentum_buffer" "$t/consolidated.safetensors" || FAIL "the consolidated file holds no momentum buffers"
resumes_to_step3 "the consolidated file" 1e-4 "$t/consolidated.safetensors"
out=$("$DT" checkpoint reshard "$t/gpt.dt" "$t/ckdir" --mesh 2 --plan "$SRC/examples/gpt_tp.json" -o "$t/ck_tp2" 2>&1) ||
  FAIL "reshard: $out"
resumes_to_step3 "the resharded checkpoint" 1e-4 "$t/ck_tp2" --mesh 2 --plan "$SRC/examples/gpt_tp.json"
expect_error "is not a checkpoint directory" checkpoint consolidate "$t/w.safetensors" -o "$t/x.safetensors"
expect_error "is the checkpoint being resharded" checkpoint reshard "$t/gpt.dt" "$t/ckdir" --mesh 2 \
  --plan "$SRC/examples/gpt_tp.json" -o "$t/ckdir"

# Gradients of the first step.
"$DT" train "$t/gpt.dt" --weights "$t/w.safetensors" --data "$t/d.safetensors" --grads-out "$t/g.safetensors" \
  >/dev/null 2>&1 || FAIL "--grads-out"
for p in wte.weight h.0.attn.q_proj.weight h.0.mlp.fc_out.bias ln_f.weight lm_head.weight; do
  grep -aq "\"$p\"" "$t/g.safetensors" || FAIL "--grads-out has no gradient $p"
done

# AdamW.
adam=$("$DT" train "$t/gpt.dt" --weights "$t/w.safetensors" --data "$t/d.safetensors" --steps 3 --optimizer adamw \
  --lr 1e-3 --weight-decay 0.01 --json 2>&1) || FAIL "adamw: $adam"
a1=$(losses "$adam" | head -1); a3=$(losses "$adam" | tail -1)
awk -v a="$a1" -v b="$a3" 'BEGIN { exit !(b < a) }' || FAIL "AdamW did not lower the loss: $a1 -> $a3"

# Errors a user can reach: exit 2 and a message naming the problem.
expect_error() {  # expect_error <label> <pattern> <args...>
  local label="$1" pattern="$2"
  shift 2
  local out
  out=$("$DT" "$@" 2>&1)
  local rc=$?
  [ $rc -eq 2 ] || FAIL "$label: exit $rc (expected 2): $out"
  echo "$out" | grep -q -- "$pattern" || FAIL "$label: message lacks '$pattern': $out"
}
expect_error "steps 0" "--steps must be >= 1" train "$t/gpt.dt" --weights "$t/w.safetensors" --data "$t/d.safetensors" --steps 0
expect_error "mesh without plan" "--mesh and --plan go together" train "$t/gpt.dt" --weights "$t/w.safetensors" \
  --data "$t/d.safetensors" --mesh 2
"$DT" example gpt --hidden 64 --heads 2 --layers 1 -o "$t/noloss.dt" --weights "$t/nw.safetensors" \
  --inputs "$t/nd.safetensors" >/dev/null 2>&1 || FAIL "example without loss"
expect_error "no scalar loss" "must be a floating scalar" train "$t/noloss.dt" --weights "$t/nw.safetensors" \
  --data "$t/nd.safetensors"
expect_error "no scalar loss: the hint" "written with --loss" train "$t/noloss.dt" --weights "$t/nw.safetensors" \
  --data "$t/nd.safetensors"
expect_error "save over weights" "is the same file as weights" train "$t/gpt.dt" --weights "$t/w.safetensors" \
  --data "$t/d.safetensors" --save "$t/w.safetensors"
"$DT" example gpt --hidden 512 --heads 8 --layers 1 --vocab 1000 --batch 3 --seq 32 --loss -o "$t/b3.dt" \
  --inputs "$t/d3.safetensors" >/dev/null 2>&1 || FAIL "example batch 3"
expect_error "data shape" "data input has shape \[3, 32\]" train "$t/gpt.dt" --weights "$t/w.safetensors" \
  --data "$t/d3.safetensors"
expect_error "recompute all" "blocks" train "$t/gpt.dt" --weights "$t/w.safetensors" --data "$t/d.safetensors" \
  --recompute all

# Issue 29.11: a non-finite loss stops training at that step, exit 1, nothing saved (an earlier
# checkpoint at --save is kept); --allow-non-finite goes on. lr 1e6 makes SGD diverge.
"$DT" example gpt --hidden 64 --heads 2 --layers 1 --loss -o "$t/small.dt" --weights "$t/sw.safetensors" \
  --inputs "$t/sd.safetensors" >/dev/null 2>&1 || FAIL "example small"
echo keep > "$t/last_good"
for mesh in "" "--mesh 2 --plan $SRC/examples/gpt_tp.json"; do
  out=$(timeout 600 "$DT" train "$t/small.dt" --weights "$t/sw.safetensors" --data "$t/sd.safetensors" --steps 8 \
    --lr 1e6 $mesh --save "$t/last_good" 2>&1)
  status=$?
  [ $status -eq 1 ] && echo "$out" | grep -q "the loss is .*training stopped, nothing saved" ||
    FAIL "a diverging run ($mesh) did not stop with exit 1: exit $status: $(echo "$out" | tail -2)"
  [ "$(cat "$t/last_good")" = keep ] || FAIL "a diverging run ($mesh) overwrote --save"
done
out=$(timeout 600 "$DT" train "$t/small.dt" --weights "$t/sw.safetensors" --data "$t/sd.safetensors" --steps 8 \
  --lr 1e6 --allow-non-finite --json 2>&1) || FAIL "--allow-non-finite did not go on: $out"
[ "$(losses "$out" | grep -c .)" -eq 8 ] || FAIL "--allow-non-finite ran $(losses "$out" | grep -c .) of 8 steps"
# Data whose inputs hold different numbers of batches (3 inputs, 2 targets) is refused.
python3 - "$t/sd.safetensors" "$t/mixed_batches.safetensors" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header, body = json.loads(data[8:8 + n]), data[8 + n:]
out, blobs, at = {}, b"", 0
for name, k in (("input", 3), ("target", 2)):
    e = header[name]
    blob = body[e["data_offsets"][0]:e["data_offsets"][1]] * k
    out[name] = {"dtype": e["dtype"], "shape": [k] + e["shape"], "data_offsets": [at, at + len(blob)]}
    blobs += blob
    at += len(blob)
h = json.dumps(out).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + blobs)
PY
expect_error "batch counts" "every input needs the same number" train "$t/small.dt" --weights "$t/sw.safetensors" \
  --data "$t/mixed_batches.safetensors"
# --timeout-s (sharded training): validated, refused without --mesh.
expect_error "timeout without mesh" "--timeout-s applies to sharded training only" train "$t/small.dt" \
  --weights "$t/sw.safetensors" --data "$t/sd.safetensors" --timeout-s 5
expect_error "timeout 0" "--timeout-s must be a number of seconds in (0, 1000000], got 1000001" train "$t/small.dt" \
  --weights "$t/sw.safetensors" --data "$t/sd.safetensors" --mesh 2 --plan "$SRC/examples/gpt_tp.json" --timeout-s 1000001
out=$(timeout 600 "$DT" train "$t/small.dt" --weights "$t/sw.safetensors" --data "$t/sd.safetensors" --steps 1 \
  --mesh 2 --plan "$SRC/examples/gpt_tp.json" --timeout-s 30 2>&1) || FAIL "train --timeout-s 30: $out"
expect_error "beta1 1" "beta1 must be in \[0, 1), got 1" train "$t/small.dt" --weights "$t/sw.safetensors" \
  --data "$t/sd.safetensors" --optimizer adamw --beta1 1

# Pipeline parallelism: examples/gpt_pp_dp_tp.json on 2x2x2 (2 stages, dp 2 and tp 2 within each,
# 2 micro-batches in the 1F1B order) gives the single-device losses; its --save FILE writes full tensors.
"$DT" example gpt --hidden 64 --heads 4 --layers 4 --vocab 128 --batch 4 --seq 16 --loss -o "$t/pp.dt" \
  --weights "$t/ppw.safetensors" --inputs "$t/ppd.safetensors" >/dev/null 2>&1 || FAIL "example gpt for the pipeline"
single=$(timeout 600 "$DT" train "$t/pp.dt" --weights "$t/ppw.safetensors" --data "$t/ppd.safetensors" --steps 3 \
  --json 2>&1) || FAIL "single-device train of the pipeline's model: $single"
out=$(timeout 600 "$DT" train "$t/pp.dt" --weights "$t/ppw.safetensors" --data "$t/ppd.safetensors" --steps 3 --json \
  --mesh 2x2x2 --plan "$SRC/examples/gpt_pp_dp_tp.json" --save "$t/pp_trained.safetensors" 2>&1) ||
  FAIL "pp x dp x tp train: $out"
same_losses "pp x dp x tp" "$out" "$single" 1e-6
[ -s "$t/pp_trained.safetensors" ] || FAIL "pp x dp x tp --save wrote nothing"
out=$(timeout 600 "$DT" train "$t/pp.dt" --weights "$t/ppw.safetensors" --data "$t/ppd.safetensors" --steps 3 --json \
  --mesh 2x2x2 --plan "$SRC/examples/gpt_pp_dp_tp.json" --recompute blocks 2>&1) ||
  FAIL "pp x dp x tp train --recompute blocks: $out"
same_losses "pp x dp x tp, blocks recomputed" "$out" "$single" 1e-6
# --save DIR: the pipeline's sharded checkpoint (each stage's tensors on its sub-mesh's ranks, format
# version 3). 2 momentum steps saved, then 1 resumed step on the same pipeline, on one device, and
# from `checkpoint consolidate`'s file, give the uninterrupted 3-step run's 3rd loss; `run` loads it.
pp=(--mesh 2x2x2 --plan "$SRC/examples/gpt_pp_dp_tp.json")
ppargs=(train "$t/pp.dt" --data "$t/ppd.safetensors" --momentum 0.9 --lr 0.05 --json)
out=$(timeout 600 "$DT" "${ppargs[@]}" --weights "$t/ppw.safetensors" --steps 3 "${pp[@]}" 2>&1) ||
  FAIL "3 pipeline momentum steps: $out"
pp_third=$(losses "$out" | sed -n 3p)
out=$(timeout 600 "$DT" "${ppargs[@]}" --weights "$t/ppw.safetensors" --steps 2 "${pp[@]}" --save "$t/pp_ckdir" 2>&1) ||
  FAIL "pipeline --save DIR: $out"
grep -q '"version": 3' "$t/pp_ckdir/checkpoint.json" || FAIL "the pipeline's checkpoint is not format version 3"
out=$("$DT" checkpoint consolidate "$t/pp_ckdir" -o "$t/pp_consolidated.safetensors" 2>&1) ||
  FAIL "consolidate the pipeline's checkpoint: $out"
for from in "$t/pp_ckdir ${pp[*]}" "$t/pp_ckdir" "$t/pp_consolidated.safetensors"; do
  read -r -a resume <<<"$from"
  out=$(timeout 600 "$DT" "${ppargs[@]}" --steps 1 --weights "${resume[@]}" 2>&1) || FAIL "resume from $from: $out"
  near "$pp_third" "$(losses "$out" | head -1)" 1e-5 || FAIL "step resumed from $from differs from step 3 $pp_third: $out"
done
out=$(timeout 600 "$DT" run "$t/pp.dt" --weights "$t/pp_ckdir" --inputs "$t/ppd.safetensors" "${pp[@]}" 2>&1) ||
  FAIL "run from the pipeline's checkpoint: $out"
echo "$out" | grep -q "compared with single-device run: .*: match" || FAIL "run from the pipeline's checkpoint: $out"
# Forward only (`run`, the same plan): the single-device outputs.
out=$(timeout 600 "$DT" run "$t/pp.dt" --weights "$t/ppw.safetensors" --inputs "$t/ppd.safetensors" --mesh 2x2x2 \
  --plan "$SRC/examples/gpt_pp_dp_tp.json" 2>&1) || FAIL "pp x dp x tp run: $out"
echo "$out" | grep -q "compared with single-device run: .*: match" || FAIL "pp x dp x tp run differs: $out"
# compile of the pipeline: every rank's stage program (the forward, what `run` runs) and the report
# per stage: its ranks and layers, and the activation bytes crossing the boundary per step, which
# are the batch rows one dp rank holds (batch 4 / dp 2) x seq 16 x hidden 64 x 4 bytes.
out=$("$DT" compile "$t/pp.dt" "${pp[@]}" --json 2>&1) || FAIL "compile --json of the pipeline: $out"
echo "$out" | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert (j["stages"], j["microbatches"], j["schedule"]) == (2, 2, "1f1b"), j
s0, s1 = j["stage"]
# ranks as inclusive [first, last] ranges; one program per orbit (dp and tp coordinate 0 or not, per stage)
assert s0["ranks"] == [[0, 3]] and s1["ranks"] == [[4, 7]] and s0["rank_count"] == 4, (s0["ranks"], s1["ranks"])
assert j["orbits"] == 8 and j["stage_programs_partitioned"] == 8, (j["orbits"], j["stage_programs_partitioned"])
assert s0["layers"][0] == "wte" and "h.0" in s0["layers"] and s1["layers"][-1] == "lm_head", (s0["layers"], s1["layers"])
assert len(set(s0["layers"]) | set(s1["layers"])) == len(s0["layers"]) + len(s1["layers"]), "a layer on two stages"
crossing = 4 // 2 * 16 * 64 * 4
assert s0["boundary_bytes_sent"] == s1["boundary_bytes_received"] == crossing, (s0, s1)
assert s1["boundary_bytes_sent"] == s0["boundary_bytes_received"] == 0, (s0, s1)
assert s1["program"]["collectives_per_kind"]["recv"] == 2, s1["program"]["collectives_per_kind"]
' || FAIL "compile --json of the pipeline: $out"
out=$("$DT" compile "$t/pp.dt" "${pp[@]}" --report 2>&1) || FAIL "compile --report of the pipeline: $out"
echo "$out" | grep -q "^stage 1: ranks 4-7; layers h.2, h.3, ln_f, lm_head;" ||
  FAIL "compile --report does not list stage 1: $out"
out=$("$DT" compile "$t/pp.dt" "${pp[@]}" --rank 5 2>&1) || FAIL "compile --rank 5 of the pipeline: $out"
echo "$out" | grep -q "group pp0 = \[1, 5\]" && echo "$out" | grep -q " recv" ||
  FAIL "rank 5's program has no link to rank 1 or no recv: $out"
# compile --train: the training step's programs, as `train` runs them. Rank 5 (stage 1) receives
# each micro-batch's activation, sends its gradient back and updates its parameter shards once.
out=$("$DT" compile "$t/pp.dt" "${pp[@]}" --train --rank 5 2>&1) || FAIL "compile --train --rank 5: $out"
for op in " recv" " send" " sgd_update"; do
  echo "$out" | grep -qF -- "$op" || FAIL "compile --train: rank 5's step has no$op: $out"
done
"$DT" compile "$t/pp.dt" "${pp[@]}" --train --json > "$t/pp_step.json" 2>&1 || FAIL "compile --train --json"
"$DT" compile "$t/pp.dt" "${pp[@]}" --train --recompute blocks --json > "$t/pp_step_rc.json" 2>&1 ||
  FAIL "compile --train --recompute blocks --json"
python3 - "$t/pp_step.json" "$t/pp_step_rc.json" <<'PY' || FAIL "compile --train --json of the pipeline"
import json, sys
j, rc = (json.load(open(f)) for f in sys.argv[1:3])
assert j["train"] and j["recompute"] == "none" and rc["recompute"] == "blocks", (j, rc)
crossing = 4 // 2 * 16 * 64 * 4  # each way: the activations forward, their gradients back
for s, r in zip(j["stage"], rc["stage"]):
    assert s["boundary_bytes_sent"] == s["boundary_bytes_received"] == crossing, s
    assert s["program"]["collectives_per_kind"]["send"] == 2 == s["program"]["collectives_per_kind"]["recv"], s
    # every micro-batch's backward re-runs its stage's 2 blocks: more nodes, no larger estimated peak
    assert r["program"]["nodes"] > s["program"]["nodes"], (r["program"]["nodes"], s["program"]["nodes"])
    assert r["program"]["activation_bytes_estimate"] <= s["program"]["activation_bytes_estimate"], (r, s)
PY
out=$("$DT" compile "$t/pp.dt" "${pp[@]}" --train --report 2>&1) || FAIL "compile --train --report: $out"
echo "$out" | grep -q "^pipeline of 2 stages, 2 micro-batches per step, 1f1b schedule .*: the training step$" ||
  FAIL "compile --train --report's first line: $out"
expect_error "compile --recompute without --train" "--recompute applies to the training step: add --train" compile \
  "$t/pp.dt" "${pp[@]}" --recompute blocks
expect_error "compile --train without a pipeline" "has no pipeline section: drop --train" compile "$t/pp.dt" \
  --mesh 2 --plan "$SRC/examples/gpt_tp.json" --train
# Interleaved (2 model chunks per rank): stage s runs on rank s mod 2, and the report lists all 4.
echo '{"mesh_dims": ["pp"], "pipeline": {"stages": 2, "virtual_stages": 2, "microbatches": 2, "schedule": "interleaved-1f1b"}}' \
  > "$t/pp_iv.json"
out=$("$DT" compile "$t/pp.dt" --mesh 2 --plan "$t/pp_iv.json" --train --report 2>&1) ||
  FAIL "compile --train --report of an interleaved pipeline: $out"
for s in "stage 0: rank 0" "stage 1: rank 1" "stage 2: rank 0" "stage 3: rank 1"; do
  echo "$out" | grep -q "^$s;" || FAIL "compile --report of the interleaved pipeline lacks '$s': $out"
done
# profile of the 3-d pipeline: every rank's stage, its receives (stage 1's ranks: one activation
# per micro-batch) and the tensor-parallel collectives within each stage.
out=$(timeout 600 "$DT" profile "$t/pp.dt" --weights "$t/ppw.safetensors" --inputs "$t/ppd.safetensors" "${pp[@]}" \
  --repeat 1 --threads 1 --json 2>&1) || FAIL "profile of the pipeline: $out"
echo "$out" | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["pipeline"]["stages"] == 2 and len(j["per_rank"]) == 8, j["pipeline"]
for r in j["per_rank"]:
    first = r["rank"] < 4
    assert r["stages"] == [0 if first else 1] and r["recvs"] == (0 if first else 2), r
    assert r["sends"] == (2 if first else 0) and r["collective_ms"] > 0, r
' || FAIL "profile --json of the pipeline: $out"
expect_error "compile --rank --report of a pipeline" "a pipeline's report is per stage" compile "$t/pp.dt" "${pp[@]}" \
  --rank 5 --report

finish
