// Where a GEMM's rows may be cut without changing a bit of the result: the row panels a GEMM is
// split into over a rank's threads (ops_matmul.cc), and the row chunks of the tp-overlap pass
// (passes/tp_overlap.cc), which must compute every element as the whole call would.
//
// A GEMM is split over the rank's threads only into panels of at least kGemmPanelFlops: smaller
// panels lose more to packing the shared operand than threads win. The floor is also what keeps
// results the same for any thread count: OpenBLAS's SkylakeX/Cooperlake cores (0.3.21) multiply a
// product of M*N*K <= 100^3 with their "small matrix" kernels, which round differently from the
// blocked ones, so a panel below that size differs from the same rows in a whole call (a 4-row
// ragged panel of a 100-row conv weight gradient did). Every panel, the ragged last one included,
// holds at least 2^21 = 2.1 M multiply-adds, twice that limit.
// Panel edges fall on multiples of kGemmPanelQuantum rows. OpenBLAS computes the rows of C in
// tiles of its kernel's unroll and the ragged last tile with a different edge kernel, whose sums
// round differently; so a panel edge off a tile edge changes results. Measured with Debian's
// OpenBLAS 0.3.21 on an AMD EPYC host: edges at multiples of 16, 32 or 64 rows changed up to 4% of
// the elements, multiples of 48 none (that kernel's tile is 24 rows); 48 is also a multiple of the
// 4-, 8- and 16-row tiles of OpenBLAS's other x86 sgemm kernels. Re-measured on the Xeon host with
// the Cooperlake, SkylakeX, Haswell and Prescott cores: 287 random shapes (both transposes, beta 0
// and 1) split for 2, 3 and 4 threads by this rule, all bitwise equal to the whole call.
// parallel_test checks it.
#pragma once

#include <cstdint>

namespace dt {

inline constexpr int64_t kGemmPanelFlops = int64_t(1) << 22;
inline constexpr int64_t kGemmPanelQuantum = 48;

}  // namespace dt
