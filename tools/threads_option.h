// `--threads N` of run and train: compute threads per rank (dtensor/core/parallel.h).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>

namespace dt::tools {

// Adds --threads to cmd, stored in `threads`.
void add_threads_option(CLI::App* cmd, std::optional<int>& threads);

// Sets the threads per rank from --threads, or by default hardware threads / ranks on this host
// (at least 1): `ranks` on the threads backend; under mpirun, Open MPI's local rank count
// (OMPI_COMM_WORLD_LOCAL_SIZE) when it is set. Call before any rank starts. Throws ValueError for
// a count outside [1, 1024]. Returns the count set.
int apply_threads_option(const std::optional<int>& threads, int ranks);

}  // namespace dt::tools
