// The --check-collectives debug mode of the mpi backend.
//
// Before each collective, every member gathers every member's CollectiveDesc (plus its collective
// number and group id) with MPI_Iallgather on a duplicate of the group's communicator, so the check
// traffic can never match the data traffic. All members then run the same comparison
// (find_collective_mismatch of collective_desc.h) on the same data and throw the same CommError,
// e.g. "collective #3 on group [0, 1] mismatch: rank 0 issued all_reduce(f32, 1000, sum), rank 1
// issued all_gather(f32, 1000)". A member that never arrives makes the exchange time out with the
// usual missing-rank report.
#pragma once

#include <mpi.h>

#include "dtensor/comm/mpi/mpi_work.h"

namespace dt::mpi {

// Throws CommError when the members disagree about the collective described by context.
void check_collective_matches(MPI_Comm check_comm, int group_size, const WorkContext& context,
                              Duration timeout);

}  // namespace dt::mpi
