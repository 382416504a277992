#include "dtensor/core/blas_kernels.h"

#include <cblas.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <cstring>
#include <initializer_list>

// OpenBLAS's run-time kernel selection (DYNAMIC_ARCH builds): quit + init re-reads
// OPENBLAS_CORETYPE. The gotoblas_<CORE> tables tell which cores the build holds. Weak: a build
// without them leaves them null and nothing changes.
extern "C" void gotoblas_dynamic_init(void) __attribute__((weak));
extern "C" void gotoblas_dynamic_quit(void) __attribute__((weak));
// The pthread build's worker shutdown (what its fork handler calls; the workers start again at the
// next threaded call).
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));
extern "C" char gotoblas_COOPERLAKE __attribute__((weak));
extern "C" char gotoblas_SKYLAKEX __attribute__((weak));
extern "C" char gotoblas_HASWELL __attribute__((weak));

namespace dt {

namespace {

bool has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's checks include the OS's support (XCR0), not only CPUID.
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

}  // namespace

// AMD family 0x19 (Zen 3, Zen 4) runs Haswell's kernels: Zen 4 has AVX-512 but executes a 512-bit
// FMA as two 256-bit halves, so AVX-512 kernels gain no arithmetic there; OpenBLAS's AVX2 sgemm
// (Haswell's) ran 3-7 % faster than the Cooperlake kernels OpenBLAS 0.3.21 itself picks (kernels_bench BM_Gemm,
// n = 512 and 1024, one thread: 105.9-109.1 vs 100.0-103.5 GFLOP/s, alternating; its "Zen" table,
// the same kernels with other block sizes, 81.6-105.7). Zen 5 (0x1a) has full-width 512-bit units.
// The "Zen" table OpenBLAS picks on Zen 1-3 (AVX2) is replaced by Haswell's too (replaces_core): on
// a Zen 2 (EPYC, family 0x17), one thread, bench/compare_blas.py's Llama linear shapes ran at
// 89.0-94.6 GFLOP/s with it and 91.0-97.4 with Haswell's (1.6-3.8 % faster on every shape; the
// core's FMA peak is 103, kernels_bench BM_PeakF32Fma/avx2:1), and the Llama export's forward in
// 388-393 ms against 377-389 (`dtensor profile`, three alternating pairs, load 0.5).
const char* preferred_blas_core() {
  const BlasIsa cpu = cpu_isa();
  if (cpu == BlasIsa::avx512 && amd_cpu_family() != 0x19) {
    if (cpu_has_avx512_bf16() && &gotoblas_COOPERLAKE) return "Cooperlake";  // SkylakeX's sgemm + bf16 kernels
    if (&gotoblas_SKYLAKEX) return "SkylakeX";
  }
  if (cpu >= BlasIsa::avx2 && &gotoblas_HASWELL) return "Haswell";
  return nullptr;
}

namespace {

// True when the preferred core replaces OpenBLAS's choice `own` (of ISA own_isa): wider or narrower
// kernels than OpenBLAS's, or OpenBLAS's "Zen" table, whose block sizes ran slower than Haswell's
// (the same AVX2 kernels) on each Zen measured, Zen 2 and Zen 4 (above; Zen 1 and 3 were not).
bool replaces_core(std::string_view own, BlasIsa own_isa, std::string_view preferred) {
  return blas_core_isa(preferred) != own_isa || (own == "Zen" && preferred == "Haswell");
}

// Runs while the program (or the Python extension) loads: a static initializer, after OpenBLAS's
// own constructor (a shared library's constructors run before those of the objects that link it)
// and before any BLAS call. OpenBLAS's pthread build has by then created its worker threads, which
// may still be starting; the core's table is null between quit and init, so they are shut down
// first (joined; they start again at the first threaded call, as after a fork): a process that
// crashed at startup now and then, with no output, under load, pointed there. Kernels and block
// sizes are read from the core's table at each call, which is also why OPENBLAS_CORETYPE works.
// setenv runs while no other thread of ours exists; the variable is removed again so that child
// processes choose for themselves.
bool choose_blas_kernels() {
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || std::getenv("OPENBLAS_CORETYPE")) return false;
  const BlasIsa chosen = blas_core_isa(openblas_get_corename());
  if (chosen == BlasIsa::unknown) return false;  // a newer core than we know
  // OpenBLAS's own choice stands when its kernels are as wide as those this CPU runs best (its
  // core may be newer than ours), except its Zen table; else the preferred core replaces it: wider
  // than OpenBLAS's (a CPU model newer than the release) or narrower (Zen 4).
  const char* core = preferred_blas_core();
  if (!core || !replaces_core(openblas_get_corename(), chosen, core)) return false;
  if (blas_thread_shutdown_) blas_thread_shutdown_();
  setenv("OPENBLAS_CORETYPE", core, 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
  return true;
}

const bool g_rechosen = choose_blas_kernels();

}  // namespace

std::string blas_kernels() { return openblas_get_corename(); }

bool blas_dynamic_arch() { return std::strstr(openblas_get_config(), "DYNAMIC_ARCH") != nullptr; }

BlasIsa blas_core_isa(std::string_view core) {
  for (std::string_view c : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (core == c) return BlasIsa::avx512;
  for (std::string_view c : {"Haswell", "Zen"})
    if (core == c) return BlasIsa::avx2;
  // "Unknown" is OpenBLAS's name for a table it cannot name: treat it as the baseline.
  for (std::string_view c : {"Unknown", "Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Atom", "Core2",
                             "Penryn", "Dunnington", "Nehalem", "Athlon", "Opteron", "Opteron_SSE3", "Barcelona",
                             "Nano", "Sandybridge", "Bobcat", "Bulldozer", "Piledriver", "Steamroller", "Excavator"})
    if (core == c) return BlasIsa::pre_avx2;
  return BlasIsa::unknown;
}

BlasIsa cpu_isa() {
  if (has_avx512()) return BlasIsa::avx512;
  if (has_avx2()) return BlasIsa::avx2;
  return BlasIsa::pre_avx2;
}

bool cpu_has_avx512_bf16() {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && __GNUC__ >= 11
  return has_avx512() && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

namespace {

// CPUID leaf 1's EAX (family, model, stepping) when the vendor is AMD, else 0.
unsigned amd_signature() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return 0;
  const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;  // "AuthenticAMD"
  if (!amd || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
  return eax;
#else
  return 0;
#endif
}

}  // namespace

int amd_cpu_family() {
  const unsigned eax = amd_signature();
  if (eax == 0) return -1;
  const int family = int((eax >> 8) & 0xf);
  return family == 0xf ? family + int((eax >> 20) & 0xff) : family;
}

int amd_cpu_model() {
  const unsigned eax = amd_signature();
  if (eax == 0) return -1;
  const int model = int((eax >> 4) & 0xf);
  return ((eax >> 8) & 0xf) == 0xf ? model + (int((eax >> 16) & 0xf) << 4) : model;
}

bool blas_kernels_rechosen() { return g_rechosen; }

}  // namespace dt
