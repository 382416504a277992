// Reference GEMM timings for `dtensor profile` and `dtensor bench model`: a plain [m, k] x [k, n]
// f32 GEMM of every matmul-like shape in a graph (OpDef::gemm_shape), timed on the calling thread
// (and so with its pool), fastest of 3 after a warm-up. A forward that ran only its GEMMs would
// take Σ batch · time(m, k, n): the denominator of "the fraction of the GEMM rate reached".
#pragma once

#include <cstdint>
#include <map>
#include <tuple>

#include "dtensor/ir/graph.h"

namespace dt::runtime {

using GemmTimes = std::map<std::tuple<int64_t, int64_t, int64_t>, double>;  // (m, k, n) -> seconds

// Times a reference GEMM for every matmul-like shape of `graph` not yet in `times`.
void time_gemms(const ir::Graph& graph, GemmTimes& times);
// Returns the seconds the graph's matmul-like nodes would take at the reference GEMMs' rate
// (every shape must be in `times`), and adds their FLOPs to *flops when given.
double gemm_only_seconds(const ir::Graph& graph, const GemmTimes& times, double* flops = nullptr);

}  // namespace dt::runtime
