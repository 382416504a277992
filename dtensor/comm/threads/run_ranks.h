// The `threads` backend entry point: every rank is a thread of this process.
#pragma once

#include <functional>

#include "dtensor/comm/process_group.h"

namespace dt {

// Starts n ranks as threads, each calling fn(world) with its own world ProcessGroup (rank() is
// the thread's rank, global ranks 0..n-1). Joins them all and rethrows the root-cause failure: the
// earliest exception that is not a CommError, else the earliest CommError (a rank that throws, or
// returns, makes the other ranks' pending and later collectives that need it fail at once with a
// CommError naming it; a rank that is alive but never issues makes them fail after
// options.timeout; so nothing hangs). Each rank's collectives of one group run in issue order on a
// progress thread; see threads/endpoint.h for the Work and buffer-lifetime rules.
void run_ranks(int n, const std::function<void(ProcessGroup& world)>& fn, const CommOptions& options = {});

}  // namespace dt
