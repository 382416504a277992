// Thread count of the compute kernels (the OpenBLAS GEMMs behind mm/bmm/matmul/addmm/linear).
//
// The multi-rank runtime runs one thread per rank and every rank calls kernels at the same time.
// With OpenBLAS's own thread pool that would oversubscribe the cores (ranks x BLAS threads on a
// 2-core machine), and the pthread build funnels concurrent multi-threaded calls through one
// shared server, which serialises them and makes timings unpredictable. With one BLAS thread each
// call runs entirely on the calling thread: concurrent calls are independent, safe and
// reproducible. So the default is 1, applied once before the first GEMM; a single-rank program
// (e.g. a benchmark) may raise it with set_compute_threads.
//
// `--threads N` (parallel.h) therefore leaves OpenBLAS at one thread and splits each GEMM into row
// (or column) panels on the rank's own pool, each panel one single-threaded sgemm call. Debian's
// OpenBLAS 0.3.21 has only the process-wide openblas_set_num_threads (the per-thread
// openblas_set_num_threads_local came in a later release), which cannot give R rank threads N
// threads each without sharing one server among them.
#pragma once

namespace dt {

// Sets the number of threads OpenBLAS uses for every later GEMM (n >= 1). Call it before any
// rank threads start: it changes process-wide state.
void set_compute_threads(int n);
// Returns the thread count set by set_compute_threads, or the default 1.
int compute_threads();
// Applies the default of one thread, once, unless set_compute_threads already ran. The matmul
// kernels call this before their first GEMM.
void init_compute_threads();

}  // namespace dt
