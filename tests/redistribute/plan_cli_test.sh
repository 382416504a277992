#!/usr/bin/env bash
# End-to-end test of `dtensor plan`: plans print, --json has the documented fields, --verify
# executes on the threads backend and says "verified": true, bad input exits 2.
# Usage: plan_cli_test.sh path/to/dtensor
set -u
DT="$1"
fail=0

verify() {  # verify <plan args...>: --verify --json must say "verified": true
  if ! "$DT" plan "$@" --verify --json 2>&1 | grep -q '"verified": true'; then echo "FAIL: verify $*"; fail=1; fi
}
expect_in() {  # expect_in <text> <plan args...>: the output must contain text
  local text="$1"; shift
  if ! "$DT" plan "$@" 2>&1 | grep -qF "$text"; then echo "FAIL: '$text' not in: plan $*"; fail=1; fi
}

# Verified with uneven shapes, nested and swapped shards, partials, empty shards.
verify --mesh 8 --shape 1023x517 --from 'S(1)' --to 'S(0)'
verify --mesh 2x4 --shape 1023x517 --from 'S(0),S(1)' --to 'S(1),S(0)'
verify --mesh 2x4 --shape 37x5 --from 'S(0),S(0)' --to 'R,S(1)'
verify --mesh 2x2x2 --shape 9x3 --dtype bf16 --from 'P(sum),S(1),S(0)' --to 'S(0),R,P(sum)'
verify --mesh 4 --shape 3x2 --dtype i64 --from 'P(max)' --to 'S(0)'
verify --mesh 3 --shape 0x4 --from 'S(0)' --to 'S(1)'

# JSON fields (S(1) -> S(0) on 8 ranks moves 7/64 of 4 MiB per rank).
for field in '"steps"' '"mesh_dim": 0' '"kind": "all_to_all"' '"bytes": 458752' '"total_bytes": 458752' '"collectives"'; do
  expect_in "$field" --mesh 8 --shape 1024x1024 --from 'S(1)' --to 'S(0)' --json
done

# Table, backward, cost model (alpha 0, 1 GB/s: 192 bytes take 0.192 us).
expect_in "bytes per rank" --mesh 2x4 --shape 1023x517 --from 'S(0),S(1)' --to 'S(1),S(0)'
expect_in '"to": "R"' --mesh 4 --shape 8x8 --from 'P(sum)' --to 'S(0)' --backward --json
expect_in '"total_time_us": 0.192' --mesh 4 --shape 8x8 --from 'S(0)' --to R --alpha-us 0 --beta-gbs 1 --json

# Cross-mesh transfers (pipeline stages): verified on the threads backend, bytes = planned bytes.
verify --from-mesh 2x2 --to-mesh 4 --shape 10x6 --from 'S(0),R' --to 'S(1)'
verify --from-mesh 4 --to-mesh 2x3 --shape 7x5 --dtype bf16 --from 'S(1)' --to 'S(0),S(1)'
verify --from-mesh 2 --to-mesh 3 --shape 2x3 --from 'R' --to 'S(0)'
# 10 rows S(0) over 2 ranks to S(0) over 3: rows [4,5) cross from rank 0 to rank 3 (16 bytes each row of 4 f32).
for field in '"total_bytes": 160' '"src": 0' '"dst": 3' '"begin": [' ; do
  expect_in "$field" --from-mesh 2 --to-mesh 3 --shape 10x4 --from 'S(0)' --to 'S(0)' --json
done
expect_in "total: 4 pieces, 160 bytes" --from-mesh 2 --to-mesh 3 --shape 10x4 --from 'S(0)' --to 'S(0)'

# Bad input: exit 2 with a clear message.
for args in "--mesh 2x4 --shape 8x8 --from P(sum),R --to P(max),R" \
            "--mesh 2x4 --shape 8x8 --from S(0) --to R,R" \
            "--mesh 2x --shape 8x8 --from S(0) --to R" \
            "--mesh 4 --shape 8x8 --from S(2) --to R" \
            "--mesh 4 --shape 8xa --from S(0) --to R" \
            "--mesh 4 --shape 8x8 --dtype f99 --from S(0) --to R" \
            "--from-mesh 2 --shape 8x8 --from S(0) --to R" \
            "--from-mesh 2 --to-mesh 2 --mesh 4 --shape 8x8 --from S(0) --to R" \
            "--from-mesh 2 --to-mesh 2 --shape 8x8 --from P(sum) --to R" \
            "--from-mesh 2 --to-mesh 2 --shape 8x8 --from S(0) --to R --backward" \
            "--shape 8x8 --from S(0) --to R"; do
  # shellcheck disable=SC2086
  "$DT" plan $args >/dev/null 2>/tmp/plan_cli_test.$$
  rc=$?
  if [ $rc -ne 2 ] || ! grep -q "dtensor: error:" /tmp/plan_cli_test.$$; then echo "FAIL: '$args' exited $rc"; cat /tmp/plan_cli_test.$$; fail=1; fi
done
rm -f /tmp/plan_cli_test.$$
[ $fail -eq 0 ] && echo "plan_cli_test: all passed"
exit $fail
