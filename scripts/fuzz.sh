#!/usr/bin/env bash
# The fuzz harnesses (fuzz/) and their seed inputs, taken from examples/ and tests/.
#
#   scripts/fuzz.sh seeds NAME DIR            copies NAME's seed inputs into DIR
#   scripts/fuzz.sh replay BINARY NAME        runs a replay binary (fuzz/replay_main.cc) over the
#                                             seeds and the regression inputs in tests/fuzz/NAME
#   (run uses a fixed libFuzzer seed, FUZZ_SEED, default 1: CI explores the same inputs as a
#   developer's run of the same commit, so a finding there reproduces, and a new finding cannot
#   appear by chance in CI alone; set FUZZ_SEED to explore further)
#   scripts/fuzz.sh run BUILD SECONDS NAME... runs each libFuzzer harness BUILD/fuzz/fuzz_NAME for
#                                             SECONDS (two at a time), prints executions per
#                                             harness, fails when one found a crash
# A crash leaves its input in BUILD/fuzz-artifacts/NAME/: fix the bug, then copy the input into
# tests/fuzz/NAME/ so the replay test keeps it fixed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

seed_files() {  # NAME: prints the seed files of a harness
  case "$1" in
    ir_text|interpreter) find "$root/examples" "$root/tests/ir" "$root/tests/passes" -name '*.dt' ;;
    safetensors) find "$root/tests/reference" -name '*.safetensors' -size -256k ;;
    plan_json) find "$root/examples" -name '*.json' ;;
    # PyTorch's exports (dynamic dims: the harness sizes them 2) and the hand-made malformed models
    # of tests/onnx/onnx_import_model_test.cc (in tests/fuzz/onnx, below).
    onnx) find "$root/tests/reference/onnx" -name '*.onnx' ;;
    *) echo "fuzz.sh: unknown harness $1" >&2; exit 2 ;;
  esac
  if [ -d "$root/tests/fuzz/$1" ]; then find "$root/tests/fuzz/$1" -type f; fi
}

seeds() {  # NAME DIR
  mkdir -p "$2"
  local i=0
  while read -r f; do cp "$f" "$2/seed_${i}_$(basename "$f")"; i=$((i + 1)); done < <(seed_files "$1")
}

case "${1:-}" in
  seeds) seeds "$2" "$3" ;;
  replay)
    binary="$2"; name="$3"
    mapfile -t files < <(seed_files "$name")
    "$binary" "${files[@]}"
    ;;
  run)
    build="$2"; seconds="$3"; shift 3
    status=0
    run_one() {  # NAME: one harness for $seconds; prints "NAME: N executions" or the crash
      local name="$1" log="$build/fuzz-logs/$1.log"
      rm -rf "$build/fuzz-seeds/$name"
      seeds "$name" "$build/fuzz-seeds/$name"
      mkdir -p "$build/fuzz-corpus/$name" "$build/fuzz-artifacts/$name" "$build/fuzz-logs"
      if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
          "$build/fuzz/fuzz_$name" -seed="${FUZZ_SEED:-1}" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
          -rss_limit_mb=2048 -max_len=65536 -artifact_prefix="$build/fuzz-artifacts/$name/" \
          "$build/fuzz-corpus/$name" "$build/fuzz-seeds/$name" > "$log" 2>&1; then
        local execs
        execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
        echo "fuzz $name: ${execs:-?} executions in ${seconds}s, no crash"
      else
        echo "fuzz $name: FAILED (log $log, input in $build/fuzz-artifacts/$name/)"
        grep -m 5 -E 'ERROR|fuzz:|runtime error' "$log" || tail -20 "$log"
        return 1
      fi
    }
    pids=()
    names=()
    for name in "$@"; do
      run_one "$name" > "$build/fuzz-$name.summary" 2>&1 &
      pids+=($!)
      names+=("$name")
      # Two harnesses at a time: the CI machine has two cores.
      if [ ${#pids[@]} -ge 2 ]; then
        wait "${pids[0]}" || status=1
        cat "$build/fuzz-${names[0]}.summary"
        pids=("${pids[@]:1}")
        names=("${names[@]:1}")
      fi
    done
    for i in "${!pids[@]}"; do
      wait "${pids[$i]}" || status=1
      cat "$build/fuzz-${names[$i]}.summary"
    done
    exit $status
    ;;
  *) sed -n 2,12p "$0"; exit 2 ;;
esac
