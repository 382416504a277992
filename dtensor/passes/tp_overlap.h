// The cost model of the tp-overlap pass (tp_overlap.cc), apart so that a test can ask it directly.
//
// A rowwise linear (the second matmul of a Megatron pair) computes a Partial result that is
// all_reduced at once: plain, the rank computes the whole GEMM (G) and then waits for the whole
// all_reduce (A = α + bytes/β). Split into k row chunks, chunk i's all_reduce runs on its group's
// progress thread while the rank computes chunk i+1; the pieces are concatenated after the last
// wait (a copy of the result, C = 2 · bytes / mem_gbs: read and write). With g = G/k and
// a = α + bytes/(k·β), a pipeline of k stages on one compute and one comm stream takes
//   T(k) = g + (k - 1) · max(g, a) + a + C,
// so the split pays when T(k) < G + A: each extra collective's α and the copy must be paid back by
// the comm time hidden behind compute. A chunk whose all_reduce comm-lowering would turn into a
// blocking one-shot (bytes <= PassOptions::one_shot_threshold_bytes) cannot overlap anything:
// such a k is never chosen. Chunks are cut where a GEMM's rows may be cut without changing a bit
// (kernels/gemm_panels.h): at multiples of kGemmPanelQuantum rows, each chunk at least
// kGemmPanelFlops; a GEMM too small for two such chunks is never split, even when forced.
#pragma once

#include <cstdint>
#include <string>

#include "dtensor/passes/pass.h"

namespace dt::passes {

struct TpOverlapChoice {
  int chunks = 1;          // 1: keep the plain order
  int64_t chunk_rows = 0;  // rows of every chunk but the last (a multiple of kGemmPanelQuantum)
  double plain_us = 0;     // G + A
  double split_us = 0;     // T(chunks) (= plain_us when chunks == 1)
  double gemm_us = 0, all_reduce_us = 0, copy_us = 0;
  std::string reason;      // one line: why this k (or why not split)
};

// Chooses k for a GEMM of `flops` whose result (`rows` rows, `bytes` in all) is all_reduced,
// under options.tp_overlap (auto: the best k in [2, kMaxTpOverlapChunks] if it beats the plain
// order; on: the best k even if it does not; off: 1) and options.tp_overlap_chunks (> 0: that k,
// or fewer when rounding the chunks up to whole quanta leaves fewer).
inline constexpr int kMaxTpOverlapChunks = 8;
TpOverlapChoice choose_tp_overlap(double flops, int64_t rows, int64_t bytes, const PassOptions& options);

}  // namespace dt::passes
