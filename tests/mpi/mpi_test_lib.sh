# Set-up shared by the mpirun test scripts that run dtensor into $out/stdout and $out/stderr,
# sourced after `set -u`: the scratch directory $out, removed on exit, and fail, which prints
# both files and exits 1 (a failed mpirun step leaves nothing worth checking after it); and the
# comparisons of losses and of safetensors files below.
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() {
  echo "FAIL: $*"
  echo "--- stdout"; cat "$out/stdout" 2>/dev/null
  echo "--- stderr"; cat "$out/stderr" 2>/dev/null
  exit 1
}
# same_losses A B N: the first N losses printed in files A and B agree within 1e-5 relative (each
# differing step is printed).
same_losses() {
  paste <(grep -o 'loss [0-9.e+-]*' "$1" | head -"$3" | cut -d' ' -f2) \
        <(grep -o 'loss [0-9.e+-]*' "$2" | head -"$3" | cut -d' ' -f2) |
    awk -v want="$3" '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) { print "step " n ": " $1 " vs " $2; bad = 1 } }
         END { exit (n == want && !bad) ? 0 : 1 }'
}
# compare_safetensors A B [ATOL]: the two safetensors files hold the same tensor names, shapes and f32
# values within 1e-5 of each tensor's largest |value| plus ATOL (default 0; for tensors that are
# rounding noise around zero, such as the gradient of a key bias, which softmax cancels).
compare_safetensors() {
  python3 - "$1" "$2" "${3:-0}" <<'PY'
import json, struct, sys
def load(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
    out = {}
    for k, v in h.items():
        s, e = v['data_offsets']
        raw = b[8 + n + s:8 + n + e]
        assert v['dtype'] == 'F32', (k, v['dtype'])
        out[k] = (v['shape'], struct.unpack('<%df' % (len(raw) // 4), raw))
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
for k in a:
    assert a[k][0] == b[k][0], (k, a[k][0], b[k][0])
    scale = max([abs(x) for x in a[k][1]] + [1e-30])
    d = max([abs(x - y) for x, y in zip(a[k][1], b[k][1])] + [0])
    assert d <= 1e-5 * scale + float(sys.argv[3]), '%s: max |diff| %g of max |value| %g' % (k, d, scale)
print('%s: %d tensors match' % (sys.argv[2].split('/')[-1], len(a)))
PY
}
