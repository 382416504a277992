#include "dtensor/core/threading.h"

#include <cblas.h>

#include <atomic>
#include <mutex>

#include "dtensor/core/blas_kernels.h"
#include "dtensor/core/error.h"

namespace dt {

namespace {
std::once_flag g_init;
std::atomic<int> g_threads{1};
}  // namespace

void set_compute_threads(int n) {
  if (n < 1) DT_THROW(ValueError) << "compute thread count must be at least 1, got " << n;
  std::call_once(g_init, [] {});  // the default must not overwrite this choice later
  openblas_set_num_threads(n);
  g_threads = n;
}

int compute_threads() { return g_threads; }

void init_compute_threads() {
  (void)blas_kernels_rechosen();  // links the kernel choice made at load (blas_kernels.h)
  std::call_once(g_init, [] { openblas_set_num_threads(g_threads.load()); });
}

}  // namespace dt
