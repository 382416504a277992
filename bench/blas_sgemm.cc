// One BLAS's sgemm on the Llama export's linear shapes: C [M, N] = A [M, K] @ W [N, K]^T (a
// linear's call), M = 1024, through the Fortran `sgemm_` symbol every BLAS exports, so the same
// source links against OpenBLAS, BLIS or any other. Prints GFLOP/s per shape, the best of R runs
// (argv[1], default 20). Built and run by bench/compare_blas.py, not by CMake: the other BLAS
// libraries are not dependencies.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
extern "C" void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                       const int*, const float*, const int*, const float*, float*, const int*);
int main(int argc, char** argv) {
  const int M = 1024, shapes[][2] = {{512, 512}, {256, 512}, {1536, 512}, {512, 1536}, {4096, 512}};
  const int reps = argc > 1 ? atoi(argv[1]) : 20;
  for (auto [N, K] : shapes) {
    std::vector<float> a(size_t(M) * K), w(size_t(N) * K), c(size_t(M) * N);
    for (auto& x : a) x = float(rand()) / RAND_MAX - 0.5f;
    for (auto& x : w) x = float(rand()) / RAND_MAX - 0.5f;
    const float one = 1, zero = 0;
    double best = 1e9;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      // Column-major view: C^T[N,M] = W[N,K] (as W^T col-major, transposed) x A^T[K,M].
      sgemm_("T", "N", &N, &M, &K, &one, w.data(), &K, a.data(), &K, &zero, c.data(), &N);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    printf("N %4d K %4d: %.1f GFLOP/s\n", N, K, 2.0 * M * N * K / best / 1e9);
  }
}
