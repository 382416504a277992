// A choice between a portable kernel and a faster one that needs a CPU feature (the bf16 GEMM's
// vdpbf16ps, the packed f32 GEMM's AVX-512): read once from an environment variable, else chosen by
// CPU where the faster one was measured; tests and benchmarks override it to compare both.
#pragma once

#include <atomic>

namespace dt {

// What a switch needs to know: its variable, the names of its two paths (the values the variable
// takes), the instructions the fast one needs, whether this CPU has them, and the default by CPU.
struct KernelPathSpec {
  const char* env;       // e.g. "DTENSOR_F32_GEMM"; null: not read from the environment
  const char* portable;  // e.g. "blas"
  const char* fast;      // e.g. "packed"
  const char* needs;     // e.g. "AVX-512", for the error when the CPU lacks it
  bool (*supported)();   // the CPU (and OS) can run the fast path
  bool (*prefer_fast)(); // the default when the variable is unset (called only when supported)
};

class KernelPathSwitch {
 public:
  explicit constexpr KernelPathSwitch(const KernelPathSpec& spec) : spec_(spec) {}
  // True when the fast path is chosen. The first call reads the variable: a value other than the
  // two names, or the fast name on a CPU without its instructions, is a ValueError.
  bool fast() const;
  // Overrides the choice for this process; ValueError for the fast path on a CPU without it.
  void set(bool fast);

 private:
  bool from_environment() const;

  KernelPathSpec spec_;
  mutable std::atomic<int> chosen_{-1};  // -1 until chosen, then 0 (portable) or 1 (fast)
};

// Sets a path for a scope and restores the previous one at its end (tests, benchmarks). Path is the
// kernel's enum; Get and Set its accessors.
template <class Path, Path (*Get)(), void (*Set)(Path)>
class ScopedKernelPath {
 public:
  explicit ScopedKernelPath(Path path) : saved_(Get()) { Set(path); }
  ~ScopedKernelPath() { Set(saved_); }
  ScopedKernelPath(const ScopedKernelPath&) = delete;
  ScopedKernelPath& operator=(const ScopedKernelPath&) = delete;

 private:
  Path saved_;
};

}  // namespace dt
