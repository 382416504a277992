// Recycling of large tensor buffers (internal to Storage::allocate).
//
// Why: a fresh 64 MiB buffer from malloc is a fresh mmap, and page-faulting its 16384 4 KiB pages
// costs more than the kernel that fills it (measured on the 2-core dev VM: ~60-150 ms to allocate
// and zero 64 MiB vs ~30 ms for the add that writes it). Large buffers (>= kMinBytes) are instead
// mapped 2 MiB-aligned with transparent huge pages requested, and freed buffers are kept in a
// bounded cache (kBudgetBytes in total, oldest evicted first) for the next allocation of the same rounded size, so
// steady-state loops (iterations, benchmarks) touch no new pages.
//
// Thread-safe (one mutex); ranks running as threads share the cache. Sanitizer builds bypass it so
// that ASan keeps checking large buffers like any heap block.
#pragma once

#include <cstddef>

namespace dt::detail {

class LargeBlockCache {
 public:
  static constexpr size_t kMinBytes = size_t(1) << 20;
  static constexpr size_t kAlign = size_t(2) << 20;  // huge page size
  static constexpr size_t kBudgetBytes = size_t(512) << 20;

  // Returns the process-wide cache (never destroyed, so storages freed at exit can still return).
  static LargeBlockCache& instance();
  // Returns the rounded block size used for a request of `nbytes` (a multiple of kAlign).
  static size_t block_size(size_t nbytes) { return (nbytes + kAlign - 1) / kAlign * kAlign; }

  // Returns a block of block_size(nbytes) bytes; *zeroed tells whether it is known to be all zero
  // (a fresh mapping) or holds old contents (a recycled block).
  void* take(size_t nbytes, bool* zeroed);
  // Returns a block obtained from take(nbytes) for reuse; when the cache exceeds kBudgetBytes the
  // oldest cached blocks are unmapped.
  void give(void* block, size_t nbytes);

 private:
  LargeBlockCache() = default;
  struct Impl;
  Impl* impl();
};

}  // namespace dt::detail
