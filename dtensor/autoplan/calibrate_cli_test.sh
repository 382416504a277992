#!/bin/bash
# `dtensor calibrate` writes a machine file that --machine reads (counting the work it did, never
# timing it); --machine reaches plan-search, --plan auto and `dtensor plan`, where a slower machine
# gives a dearer estimate; a bad machine file, --machine without --plan auto and --machine with
# --alpha-us are errors (exit 2).
set -euo pipefail
DT="$1"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
"$DT" calibrate -o m.json --ranks 4 --iters 1 --small-bytes 64 --large-bytes 4096 --gemm-size 16 >out.txt
grep -q "wrote m.json: .* 4 collective kinds x 2 group sizes (16 timed calls" out.txt
# 4 kinds x group sizes {2, 4} x 2 buffer sizes x 1 iteration.
grep -q '"timed_collective_calls": 16' m.json
[ "$(grep -c '"group_size": 4' m.json)" = 4 ] && [ "$(grep -c '"group_size": 2' m.json)" = 4 ]
grep -q '"format": "dtensor-machine/1"' m.json
"$DT" example gpt --layers 2 -o g.dt --weights w.safetensors --inputs i.safetensors >/dev/null
"$DT" plan-search g.dt --mesh 4 --machine m.json --json | grep '"estimated_step_us"' >/dev/null
"$DT" compile g.dt --mesh 4 --plan auto --machine m.json >/dev/null
# A slow machine (every collective 1 ms + 1 GB/s): a dearer estimate than the defaults.
cat >slow.json <<'J'
{"format": "dtensor-machine/1", "alpha_us": 1000, "beta_gbs": 1}
J
number() { grep -m1 "\"$1\"" "$2" | tr -dc '0-9.'; }  # number KEY FILE: the first KEY's value
"$DT" plan-search g.dt --mesh 4 --json >base.txt
"$DT" plan-search g.dt --mesh 4 --json --machine slow.json >slow.txt
awk -v a="$(number estimated_step_us base.txt)" -v b="$(number estimated_step_us slow.txt)" 'BEGIN { exit !(b > a) }'
"$DT" plan --mesh 4 --shape 64x64 --from 'S(0)' --to R --json >p0.txt
"$DT" plan --mesh 4 --shape 64x64 --from 'S(0)' --to R --json --machine slow.json >p1.txt
awk -v a="$(number total_time_us p0.txt)" -v b="$(number total_time_us p1.txt)" 'BEGIN { exit !(b > a) }'
expect_error() {  # expect_error MESSAGE COMMAND...: exit 2 and MESSAGE on stderr
  local want="$1"; shift
  set +e; "$@" >/dev/null 2>err.txt; local rc=$?; set -e
  [ "$rc" = 2 ] || { echo "exit $rc, not 2: $*"; cat err.txt; exit 1; }
  grep -q -- "$want" err.txt || { echo "no '$want' in:"; cat err.txt; exit 1; }
}
echo '{"format": "dtensor-machine/1", "beta_gbs": 0}' >bad.json
expect_error "bad.json: 'beta_gbs' must be a positive finite number, got 0" "$DT" plan-search g.dt --mesh 4 --machine bad.json
expect_error "bad.json: 'beta_gbs' must be a positive" "$DT" plan --mesh 4 --shape 8 --from 'S(0)' --to R --machine bad.json
expect_error "g.dt: not valid json" "$DT" compile g.dt --mesh 4 --plan auto --machine g.dt
echo "{}" >empty.json
expect_error "empty.json: not a machine file" "$DT" run g.dt --weights w.safetensors --inputs i.safetensors --mesh 4 --plan auto --machine empty.json
expect_error "missing.json" "$DT" plan-search g.dt --mesh 4 --machine missing.json
expect_error "--machine applies to --plan auto only" "$DT" run g.dt --weights w.safetensors --inputs i.safetensors \
  --mesh 4 --plan /dev/null --machine m.json
expect_error "is replaced by --machine" "$DT" plan --mesh 4 --shape 8 --from 'S(0)' --to R --machine m.json --alpha-us 3
expect_error "at least 2" "$DT" calibrate -o x.json --ranks 1
echo ok
