// Which kernels OpenBLAS runs on this CPU, and the choice made when OpenBLAS's own is too old.
//
// A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels ("core") from the CPU model when it loads.
// For a model newer than the release, 0.3.21 falls back to its SSE3 baseline ("Prescott"): on this
// project's Xeon (model 207, AVX-512 + AVX512-BF16) sgemm then ran at ~31 GFLOP/s instead of
// 134-154 (n = 1024, one thread). So when the library loads, blas_kernels.cc chooses again by the
// CPU's features when the detected core uses narrower vectors than the CPU has, as
// OPENBLAS_CORETYPE would. A user's own OPENBLAS_CORETYPE is left alone; so is an OpenBLAS built
// for one core (no DYNAMIC_ARCH) and a CPU whose core OpenBLAS already knows, except AMD's Zen 4,
// where OpenBLAS picks its AVX-512 kernels and its AVX2 ones run faster, and Zen 1-3, where its
// "Zen" table runs the Haswell kernels with block sizes measured slower (blas_kernels.cc).
//
// OpenBLAS stays the BLAS because no other Debian one is faster here: on the AMD EPYC (Zen 4) host,
// one thread, the Llama export's linear shapes (M = 1024; N x K 256-4096 x 512, 512 x 1536),
// bench/compare_blas.py measured BLIS 0.9.0 (libblis-pthread, which picks its "zen3" AVX2 kernels)
// at 0.967-1.000 of OpenBLAS's Haswell kernels (103.0-108.1 vs 105.3-111.0 GFLOP/s) and OpenBLAS's
// own Cooperlake choice at 0.923-0.958 (load 1.3-1.7).
#pragma once

#include <string>
#include <string_view>

namespace dt {

// The widest vector instructions a BLAS core's kernels use, or the CPU has.
enum class BlasIsa { unknown = -1, pre_avx2 = 0, avx2 = 1, avx512 = 2 };

// Returns the name of the kernels OpenBLAS runs ("Cooperlake", "SkylakeX", "Haswell", ...).
std::string blas_kernels();
// True when OpenBLAS chooses its kernels at run time (a DYNAMIC_ARCH build).
bool blas_dynamic_arch();
// Returns the vector ISA of an OpenBLAS core name (unknown for a name this table lacks).
BlasIsa blas_core_isa(std::string_view core);
// Returns the widest vector ISA this CPU and its OS support.
BlasIsa cpu_isa();
// Returns the OpenBLAS core this CPU runs fastest that this build holds, or null (none known).
const char* preferred_blas_core();
// True when this CPU and its OS support AVX512-BF16 (vdpbf16ps) besides AVX-512 F/BW/VL/DQ.
bool cpu_has_avx512_bf16();
// Returns the CPU family (CPUID leaf 1, extended family added: 0x19 = AMD Zen 3/4, 6 = Intel Core)
// when the vendor is AMD, else -1.
int amd_cpu_family();
// Returns the CPU model within its family (CPUID leaf 1, extended model added: family 0x17 models
// 0x30 and up are Zen 2, below Zen 1 and Zen+) when the vendor is AMD, else -1.
int amd_cpu_model();
// True when the kernels were chosen again at load (OpenBLAS's own were not as wide as
// preferred_blas_core's, or were its Zen table).
// Referenced by init_compute_threads so that every binary running a GEMM links the choice.
bool blas_kernels_rechosen();

}  // namespace dt
