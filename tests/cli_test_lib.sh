# Set-up shared by the CLI test scripts (tests/*/*_cli_test.sh), sourced after `set -u`: a scratch
# directory $t removed on exit, FAIL to record a failure and go on (every check runs, all failures
# are printed), finish to print the outcome and exit with it, and expect_error for the user-error
# checks (needs $DT, the dtensor binary).
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail=0
FAIL() { echo "FAIL: $*"; fail=1; }
finish() {
  [ "$fail" -eq 0 ] && echo "PASS"
  exit "$fail"
}
expect_error() {  # expect_error <text> <args...>: `$DT args` exits 2 with one line containing <text>
  local text="$1"
  shift
  local out status
  out=$(timeout 120 "$DT" "$@" 2>&1)
  status=$?
  [ "$status" -eq 2 ] || FAIL "exit $status (want 2): dtensor $*: $(echo "$out" | tail -3)"
  echo "$out" | grep -qF -- "$text" || FAIL "'$text' not in output of dtensor $*: $out"
  [ "$(echo "$out" | wc -l)" -eq 1 ] || FAIL "more than one line: dtensor $*: $out"
}
