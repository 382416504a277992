#include "dtensor/core/large_block_cache.h"

#include <sys/mman.h>

#include <cstdint>
#include <vector>
#include <mutex>

#include "dtensor/core/error.h"

namespace dt::detail {

struct LargeBlockCache::Impl {
  std::mutex mu;
  std::vector<std::pair<size_t, void*>> free_blocks;  // (block size, block), oldest first
  size_t cached_bytes = 0;
};

LargeBlockCache& LargeBlockCache::instance() {
  static LargeBlockCache* cache = new LargeBlockCache();
  return *cache;
}

LargeBlockCache::Impl* LargeBlockCache::impl() {
  static Impl* impl = new Impl();
  return impl;
}

namespace {

// Maps `size` bytes (a multiple of kAlign) at a kAlign-aligned address: over-map by kAlign and
// unmap the unaligned head and the tail.
void* map_aligned(size_t size) {
  const size_t align = LargeBlockCache::kAlign;
  void* raw = mmap(nullptr, size + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) DT_THROW(Error) << "out of memory mapping " << size << " bytes";
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + align - 1) / align * align;
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + size + align;
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, size, MADV_HUGEPAGE);  // a hint: ignored where THP is disabled
  return p;
}

}  // namespace

void* LargeBlockCache::take(size_t nbytes, bool* zeroed) {
  const size_t size = block_size(nbytes);
  {
    Impl* m = impl();
    std::lock_guard<std::mutex> lock(m->mu);
    for (size_t i = m->free_blocks.size(); i-- > 0;) {  // most recently freed first
      if (m->free_blocks[i].first != size) continue;
      void* p = m->free_blocks[i].second;
      m->free_blocks.erase(m->free_blocks.begin() + ptrdiff_t(i));
      m->cached_bytes -= size;
      *zeroed = false;
      return p;
    }
  }
  *zeroed = true;  // anonymous mappings are zero-filled by the kernel
  return map_aligned(size);
}

void LargeBlockCache::give(void* block, size_t nbytes) {
  const size_t size = block_size(nbytes);
  std::vector<std::pair<size_t, void*>> evicted;
  {
    Impl* m = impl();
    std::lock_guard<std::mutex> lock(m->mu);
    m->free_blocks.emplace_back(size, block);
    m->cached_bytes += size;
    // Over budget: unmap the oldest blocks (the newest is the likeliest to be asked for again).
    size_t drop = 0;
    while (m->cached_bytes > kBudgetBytes) {
      m->cached_bytes -= m->free_blocks[drop].first;
      evicted.push_back(m->free_blocks[drop++]);
    }
    m->free_blocks.erase(m->free_blocks.begin(), m->free_blocks.begin() + ptrdiff_t(drop));
  }
  for (auto& [sz, p] : evicted) munmap(p, sz);
}

}  // namespace dt::detail
