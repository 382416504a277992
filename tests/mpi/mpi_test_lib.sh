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
