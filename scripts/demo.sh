#!/usr/bin/env bash
# The main job, end to end on the example gpt:
#   1. plan a redistribution (all_to_all instead of PyTorch's all_gather) and verify it on 8 ranks;
#   2. run the model on one device and compare with PyTorch's output;
#   3. compile it tensor-parallel for 4 ranks and show the inserted collectives;
#   4. run it on 4 ranks (threads backend) and compare with PyTorch / the single-device run;
#   5. the same on a 2x2 mesh with FSDP x TP and the collective passes on;
#   6. train the gpt (with its cross-entropy loss) for 5 SGD steps on 4 ranks.
# Uses PyTorch's reference weights from tests/reference when present, else seeded random
# weights (then the sharded runs are compared with dtensor's own single-device run).
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/dtensor
OUT=build/demo
mkdir -p "$OUT"
REF=tests/reference/gpt

step() { printf '\n== %s\n' "$*"; }

step "$($B --version)"

step "1. redistribution plan: S(1) -> S(0) on 8 ranks, 1024x1024 f32 (verified on the threads backend)"
$B plan --mesh 8 --shape 1024x1024 --dtype f32 --from 'S(1)' --to 'S(0)' --verify

MODEL=examples/gpt.dt
if [ -f "$REF/weights.safetensors" ]; then
  W=$REF/weights.safetensors; I=$REF/inputs.safetensors; EXPECT=(--expect "$REF/outputs.safetensors")
  echo "(using PyTorch's reference gpt from $REF)"
else
  step "reference folder $REF not found: writing seeded random weights and inputs"
  W=$OUT/gpt_weights.safetensors
  $B example gpt -o "$OUT/gpt.dt" --weights "$W" --inputs "$OUT/gpt_inputs.safetensors"
  MODEL=$OUT/gpt.dt; I=$OUT/gpt_inputs.safetensors; EXPECT=()
fi

step "2. single-device run of $MODEL"
$B run "$MODEL" --weights "$W" --inputs "$I" "${EXPECT[@]}"

step "3. tensor-parallel compile on 4 ranks with examples/gpt_tp.json: inserted collectives"
$B compile "$MODEL" --mesh 4 --plan examples/gpt_tp.json --report

step "4. tensor-parallel run on 4 ranks (threads backend)"
$B run "$MODEL" --weights "$W" --inputs "$I" --mesh 4 --plan examples/gpt_tp.json "${EXPECT[@]}" --rtol 1e-4

step "5. FSDP x TP on a 2x2 mesh, collective passes on (bucketing, overlap, comm lowering)"
$B run "$MODEL" --weights "$W" --inputs "$I" --mesh 2x2 --plan examples/gpt_fsdp_tp.json --passes default "${EXPECT[@]}" --rtol 1e-4

step "6. training: 5 SGD steps of the gpt with a loss, sharded on 4 ranks (tp), as PyTorch trains it"
# The reference inputs hold `target` too; otherwise write seeded random ones with the loss model.
TD=$I
if [ ! -f "$REF/weights.safetensors" ]; then TD=$OUT/gpt_data.safetensors; fi
$B example gpt --loss -o "$OUT/gpt_loss.dt" --inputs "$OUT/gpt_data.safetensors" >/dev/null
$B train "$OUT/gpt_loss.dt" --weights "$W" --data "$TD" --steps 5 --mesh 4 --plan examples/gpt_tp.json
if [ -f "$REF/config.json" ]; then
  echo "PyTorch's losses for the same 5 steps: $(tr -d '\n ' < "$REF/config.json" | sed 's/.*"sgd_losses":\[\([^]]*\)\].*/\1/')"
fi
