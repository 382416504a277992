#include "tools/threads_option.h"

#include <cstdlib>

#include "dtensor/core/error.h"
#include "dtensor/core/parallel.h"

namespace dt::tools {

void add_threads_option(CLI::App* cmd, std::optional<int>& threads) {
  cmd->add_option("--threads", threads,
                  "compute threads per rank (GEMM panels, elementwise, row and attention loops); results are "
                  "bitwise the same for any count; default: cores / ranks on this host, at least 1");
}

int apply_threads_option(const std::optional<int>& threads, int ranks) {
  constexpr int kMaxThreads = 1024;
  if (threads) {
    if (*threads < 1 || *threads > kMaxThreads)
      DT_THROW(ValueError) << "--threads must be between 1 and " << kMaxThreads << ", got " << *threads;
    set_threads_per_rank(*threads);
    return *threads;
  }
  int on_host = ranks;
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) {
    const int n = std::atoi(local);
    if (n >= 1) on_host = n;
  }
  const int n = default_threads_per_rank(on_host);
  set_threads_per_rank(n);
  return n;
}

}  // namespace dt::tools
