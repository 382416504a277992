#!/usr/bin/env bash
# The cross-host path (docs/multi_host.md): 2 "hosts" x 2 ranks, each host a network + UTS namespace
# this test makes (its own hostname, its own address on a veth pair between the two), Open MPI's
# TCP BTL between them, mpirun started on host a and its daemon on host b through an rsh agent that
# enters b's namespaces. It shows that
#   - the groups within a host use the shared-memory window and the groups across hosts go
#     through MPI (DTENSOR_MPI_LOG_GROUPS=1 says which, per group);
#   - the results equal the single-device run: tp on 4 ranks (one group across both hosts),
#     fsdp x tp on 2x2 (tp within a host, dp across), and 3 training steps with fsdp x tp give the
#     threads backend's losses.
# Traffic stays on the addresses the test made (10.251.N.1 and .2, the BTL and the runtime's
# out-of-band channel restricted to them); the namespaces (and with them the veth pair) are
# deleted on exit. Exits 77 (skipped, with the reason) where namespaces cannot be made: not root,
# no `ip` or `unshare`, or the kernel refuses.
# Usage: run_cross_host_test.sh MPIEXEC DTENSOR SOURCE_DIR
set -u
mpiexec=$1 dtensor=$2 src=$3
skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) == 0 ]] || skip "not root: network namespaces need CAP_SYS_ADMIN"
command -v ip >/dev/null || skip "no ip command (iproute2)"
command -v unshare >/dev/null || skip "no unshare command (util-linux)"

tag=$$
na=dts5a$tag nb=dts5b$tag va=dtva$tag vb=dtvb$tag
net=10.251.$((tag % 250)).0
addr_a=10.251.$((tag % 250)).1 addr_b=10.251.$((tag % 250)).2
out=$(mktemp -d)
cleanup() {
  ip netns del "$na" 2>/dev/null
  ip netns del "$nb" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT
ip netns add "$na" 2>"$out/err" || skip "cannot make a network namespace: $(cat "$out/err")"
ip netns add "$nb" || skip "cannot make a second network namespace"
ip link add "$va" type veth peer name "$vb" 2>"$out/err" || skip "cannot make a veth pair: $(cat "$out/err")"
ip link set "$va" netns "$na" && ip link set "$vb" netns "$nb" || skip "cannot move the veth ends"
ip -n "$na" addr add "$addr_a/24" dev "$va" && ip -n "$nb" addr add "$addr_b/24" dev "$vb" || skip "cannot address"
for ns in "$na" "$nb"; do ip -n "$ns" link set lo up; done
ip -n "$na" link set "$va" up && ip -n "$nb" link set "$vb" up || skip "cannot bring the veth pair up"
unshare --uts true 2>/dev/null || skip "cannot make a UTS namespace"

fail() {
  echo "FAIL: $*"
  for f in "$out"/*.out "$out"/*.err; do [[ -s $f ]] && { echo "--- $f"; tail -20 "$f"; }; done
  exit 1
}

# mpirun reaches host b through this agent (instead of ssh): it enters b's namespaces and runs the
# daemon's command line there, as a remote shell would.
cat > "$out/agent.sh" <<EOF
#!/usr/bin/env bash
host=\$1; shift
[[ \$host == $addr_b ]] || { echo "agent: unknown host \$host" >&2; exit 1; }
exec ip netns exec $nb unshare --uts /bin/sh -c "hostname hostb; \$*"
EOF
chmod +x "$out/agent.sh"
printf '%s slots=2\n%s slots=2\n' "$addr_a" "$addr_b" > "$out/hosts"
mca=(--mca plm_rsh_agent "$out/agent.sh" --mca plm_rsh_no_tree_spawn 1 --mca btl tcp,vader,self
     --mca btl_tcp_if_include "$net/24" --mca oob_tcp_if_include "$net/24")
# Runs mpirun -np 4 on the two hosts (ranks 0, 1 on host a; 2, 3 on host b) with `dtensor "$@"`.
run_hosts() {
  timeout 180 ip netns exec "$na" unshare --uts /bin/sh -c 'hostname hosta; exec "$@"' sh \
    "$mpiexec" --allow-run-as-root --hostfile "$out/hosts" --map-by slot -np 4 "${mca[@]}" \
    -x DTENSOR_MPI_LOG_GROUPS=1 -x PATH "$dtensor" "$@"
}

"$dtensor" example gpt --hidden 128 --heads 4 --layers 1 --vocab 256 --loss -o "$out/gpt.dt" \
  --weights "$out/w.safetensors" --inputs "$out/i.safetensors" >/dev/null 2>&1 || fail "dtensor example"
inputs=(--weights "$out/w.safetensors" --inputs "$out/i.safetensors")

# tp on 4 ranks: the one tp group spans both hosts.
run_hosts run "$out/gpt.dt" "${inputs[@]}" --mesh 4 --plan "$src/examples/gpt_tp.json" --backend mpi \
  >"$out/tp.out" 2>"$out/tp.err"
status=$?
[[ $status == 124 ]] && fail "tp: mpirun did not finish within 180 s"
[[ $status == 0 ]] || fail "tp: exit status $status"
grep -q 'compared with single-device run: .*: match$' "$out/tp.out" || fail "tp: no match with the single-device run"
grep -q '^dtensor mpi: group \[0, 1, 2, 3\] spans hosts: collectives through MPI$' "$out/tp.err" ||
  fail "tp: the world group is not reported across hosts"
grep -q 'shared-memory window' "$out/tp.err" && fail "tp: a group across hosts uses the shared-memory window"

# fsdp x tp on 2x2: tp groups [0, 1] (host a) and [2, 3] (host b), dp groups [0, 2], [1, 3] across.
run_hosts run "$out/gpt.dt" "${inputs[@]}" --mesh 2x2 --plan "$src/examples/gpt_fsdp_tp.json" --backend mpi \
  >"$out/fsdp_tp.out" 2>"$out/fsdp_tp.err"
status=$?
[[ $status == 0 ]] || fail "fsdp x tp: exit status $status"
grep -q 'compared with single-device run: .*: match$' "$out/fsdp_tp.out" || fail "fsdp x tp: no match"
grep -q '^dtensor mpi: group \[0, 1\] on one host (hosta): shared-memory window$' "$out/fsdp_tp.err" ||
  fail "fsdp x tp: tp group [0, 1] not on the shared-memory window of host a"
grep -q '^dtensor mpi: group \[2, 3\] on one host (hostb): shared-memory window$' "$out/fsdp_tp.err" ||
  fail "fsdp x tp: tp group [2, 3] not on the shared-memory window of host b"
for g in '0, 2' '1, 3' '0, 1, 2, 3'; do
  grep -q "^dtensor mpi: group \[$g\] spans hosts: collectives through MPI$" "$out/fsdp_tp.err" ||
    fail "fsdp x tp: group [$g] not reported across hosts"
done

# Training: 3 SGD steps with fsdp x tp give the threads backend's losses.
train=(train "$out/gpt.dt" --weights "$out/w.safetensors" --data "$out/i.safetensors" --steps 3 --mesh 2x2
       --plan "$src/examples/gpt_fsdp_tp.json")
"$dtensor" "${train[@]}" --backend threads > "$out/train_threads.out" 2>&1 || fail "threads training"
run_hosts "${train[@]}" --backend mpi >"$out/train.out" 2>"$out/train.err"
status=$?
[[ $status == 0 ]] || fail "training: exit status $status"
paste <(grep -o 'loss [0-9.e+-]*' "$out/train_threads.out" | head -3 | cut -d' ' -f2) \
      <(grep -o 'loss [0-9.e+-]*' "$out/train.out" | head -3 | cut -d' ' -f2) |
  awk 'NF == 2 { n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($1 < 0 ? -$1 : $1)) bad = 1 }
       END { exit (n == 3 && !bad) ? 0 : 1 }' || fail "training losses differ from the threads backend's"
grep -h '^dtensor mpi: ' "$out/tp.err" "$out/fsdp_tp.err"
echo "PASS"
