# Set-up shared by the mpirun test scripts that run dtensor into $out/stdout and $out/stderr,
# sourced after `set -u`: the scratch directory $out, removed on exit, and fail, which prints
# both files and exits 1 (a failed mpirun step leaves nothing worth checking after it).
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
