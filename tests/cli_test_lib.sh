# Set-up shared by the CLI test scripts (tests/*/*_cli_test.sh), sourced after `set -u`: a scratch
# directory $t removed on exit, FAIL to record a failure and go on (every check runs, all failures
# are printed), and finish to print the outcome and exit with it.
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail=0
FAIL() { echo "FAIL: $*"; fail=1; }
finish() {
  [ "$fail" -eq 0 ] && echo "PASS"
  exit "$fail"
}
