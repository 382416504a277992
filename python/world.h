// init_process_group: the process-wide world of one rank per process (mpirun), as
// torch.distributed.init_process_group. Without it (or with "threads") every mesh is made of
// in-process ranks.
#pragma once

#include <pybind11/pybind11.h>

#include "dtensor/comm/process_group.h"

namespace dt::python {

// The world of init_process_group("mpi"), or nullptr (threads: in-process ranks).
ProcessGroup* process_world();

void bind_world(pybind11::module_& m);

}  // namespace dt::python
