// The `threads` backend entry point: every rank is a thread of this process.
#pragma once

#include <functional>

#include "dtensor/comm/process_group.h"

namespace dt {

// Starts n ranks as threads, each calling fn(world) with its own world ProcessGroup (rank() is
// the thread's rank, global ranks 0..n-1). Joins them all and rethrows the first failure (a rank
// that throws makes the other ranks' pending and later collectives fail with CommError within the
// timeout, so nothing hangs).
void run_ranks(int n, const std::function<void(ProcessGroup& world)>& fn, const CommOptions& options = {});

}  // namespace dt
