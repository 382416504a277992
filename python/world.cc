#include "python/world.h"

#include <pybind11/stl.h>

#include <optional>

#include "dtensor/comm/timeout.h"
#include "dtensor/core/error.h"
#include "dtensor/runtime/launcher.h"
#ifdef DTENSOR_WITH_MPI
#include "dtensor/comm/mpi/mpi_runtime.h"
#endif

namespace dt::python {
namespace py = pybind11;
namespace {
// The MPI runtime lives until the process exits (mpi::init_mpi_world finalizes it at exit); every
// later mpi run (Job::run, train_sharded) reuses it through mpi::run_mpi.
ProcessGroupPtr g_world;
}  // namespace

ProcessGroup* process_world() { return g_world.get(); }

void bind_world(py::module_& m) {
  m.def(
      "_init_process_group",
      [](const std::string& backend, std::optional<double> timeout_s) {
        runtime::Backend b = runtime::parse_backend(backend);
        // Every collective of the world and its subgroups gives up after this and raises CommError.
        CommOptions options;
        if (timeout_s) options.timeout = timeout_from_seconds(*timeout_s, "timeout");
        if (b == runtime::Backend::threads) return;
        if (g_world) return;  // once per process, as torch.distributed
#ifdef DTENSOR_WITH_MPI
        if (!mpi::launched_by_mpi_launcher())
          DT_THROW(ValueError) << "init_process_group(\"mpi\") runs one process per rank: start the script with "
                                  "mpirun -np N python3 SCRIPT";
        g_world = mpi::init_mpi_world(options);
#else
        DT_THROW(ValueError) << "init_process_group(\"mpi\"): this dtensor was built without Open MPI";
#endif
      },
      py::arg("backend"), py::arg("timeout_s"));
  m.def("_get_rank", [] { return g_world ? g_world->rank() : 0; });
  m.def("_get_world_size", [] { return g_world ? g_world->size() : 1; });
}

}  // namespace dt::python
