#!/usr/bin/env bash
# Runs the threaded tests of a ThreadSanitizer build (`make tsan`): the comm backend, the fault
# tests, the async collectives, the launcher, and the per-rank thread pool with the kernels it
# splits (parallel_test). The collectives matrix (threads backend × world
# size × dtype × op × group, 1361 cases) is sampled: a fixed 1-in-16 slice (gtest shard 5 of 16,
# 85 cases), the same on every run, so a TSan report always reproduces; the rest of each binary
# runs in full. MPI is off in this build: Open MPI's libraries are not instrumented, so TSan
# reports races inside them that are not ours (the mpi fault tests run in the normal ctest suite).
set -euo pipefail
build="${1:-build-tsan}"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 history_size=4"
run() {  # NAME [gtest args...]
  local name="$1"
  shift
  echo "tsan: $name $*"
  "$build/stages/${dir[$name]}/$name" "$@" --gtest_brief=1
}
declare -A dir=(
  [comm_threads_test]=comm [comm_fault_test]=comm [comm_collectives_test]=comm
  [comm_symmetric_arena_test]=comm [launcher_test]=runtime [runtime_trace_test]=runtime
  [eager_async_test]=eager
  [parallel_test]=kernels
)
run comm_threads_test --gtest_filter='-Threads/CollectiveMatrix.*'
GTEST_TOTAL_SHARDS=16 GTEST_SHARD_INDEX=5 run comm_threads_test --gtest_filter='Threads/CollectiveMatrix.*'
for t in comm_fault_test comm_collectives_test comm_symmetric_arena_test launcher_test runtime_trace_test \
  eager_async_test parallel_test; do
  run "$t"
done
echo "tsan: no data race reported"
