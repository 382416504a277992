// `dtensor bench collectives-mpi` (run under mpirun): the collectives bench of the threads backend,
// on the mpi backend, plus raw MPI_Allreduce / MPI_Allgather on the same buffers.
#pragma once

#include <cstddef>

namespace dt::bench {

// Initializes MPI, times every collective of the mpi backend on the world, and prints (rank 0) the
// same table / JSON as `dtensor bench collectives`, with raw Open MPI timings and the ratio
// ours/raw for all_reduce and all_gather. Sets bench_exit_code() = 1 when a result is wrong.
void run_collectives_bench_mpi(size_t bytes, int iters, bool json);

}  // namespace dt::bench
