// The packed kernels' vector widths a test runs at (gemm_f32_packed_test.cc, exp_row_fma_test.cc):
// every width this CPU has, each set in turn, so an AVX-512 CPU checks the AVX2 kernels too.
#pragma once

#include <vector>

#include "dtensor/core/error.h"
#include "dtensor/kernels/gemm_f32_packed.h"

namespace dt::test {

// Returns the widths this CPU runs: none without AVX2 and FMA, AVX2, and AVX-512 where it has it.
inline std::vector<PackedIsa> cpu_packed_isas() {
  if (!f32_packed_supported()) return {};
  ScopedPackedIsa widest(packed_isa());
  try {
    set_packed_isa(PackedIsa::avx512);
  } catch (const ValueError&) {
    return {PackedIsa::avx2};
  }
  return {PackedIsa::avx2, PackedIsa::avx512};
}

inline const char* packed_isa_name(PackedIsa isa) { return isa == PackedIsa::avx512 ? "AVX-512" : "AVX2"; }

}  // namespace dt::test
