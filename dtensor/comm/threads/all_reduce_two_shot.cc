// Two-shot all_reduce, for large buffers: a reduce-scatter then an all-gather, both reading the
// peers' `buf` directly, with no scratch and no staging copy.
//
// `buf` (count elements) is cut into n slices; slice s is owned by rank s. Slice length is
// ceil(count / n) rounded up to a whole cache line (16 f32), so owners never write the same line;
// trailing slices can be short or empty. Example: count 1000 f32, n 3 -> slice 336: [0, 336),
// [336, 672), [672, 1000).
//
//   phase 1 (reduce-scatter)  rank r reduces slice r of every rank's buf, in rank order 0..n-1,
//                             and stores it into slice r of its own buf;
//   barrier "reduced"         every slice holds its final value in its owner's buf;
//   phase 2 (all-gather)      rank r copies slice s from rank s's buf into its own buf, s != r;
//   barrier "gathered"        every rank has read my slice; nobody touches my buf any more.
//
// Why in place is safe: in phase 1 slice r of any buf is read only by rank r, and rank r reads
// each block of its own slice before storing that block (reduce_buffers), so the store never
// races a reader. In phase 2 slice s is read only from its owner, which no longer writes, and rank
// r writes only the slices of its own buf that it does not own, which nobody reads in phase 2.
//
// Per rank it reads n slices and writes 1 in phase 1, then reads and writes n-1 slices in phase 2:
// 2(n-1)/n of the buffer crosses between ranks, the bus-bandwidth optimum.
#include <algorithm>
#include <cstring>

#include "dtensor/comm/reduce_kernel.h"
#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

namespace {

constexpr size_t kCacheLine = 64;

// Returns [begin, end) of slice s of a buffer of `count` elements split over n owners.
std::pair<size_t, size_t> slice_range(size_t count, int n, int s, size_t elem_size) {
  size_t align = std::max<size_t>(1, kCacheLine / elem_size);
  size_t slice = (count + size_t(n) - 1) / size_t(n);
  slice = (slice + align - 1) / align * align;
  size_t begin = std::min(count, slice * size_t(s));
  size_t end = std::min(count, begin + slice);
  return {begin, end};
}

}  // namespace

void all_reduce_two_shot(AlgorithmContext& ctx) {
  const CollectiveDesc& desc = ctx.mine().desc;
  int n = ctx.size();
  size_t elem = itemsize(desc.dtype);
  if (n == 1 || desc.count == 0) return;

  auto [begin, end] = slice_range(desc.count, n, ctx.me, elem);
  std::vector<const void*> slices(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    slices[size_t(i)] = static_cast<const std::byte*>(ctx.part(i).out) + begin * elem;
  void* my_slice = static_cast<std::byte*>(ctx.mine().out) + begin * elem;
  reduce_buffers(slices.data(), n, my_slice, end - begin, desc.dtype, desc.reduce_op);
  ctx.barrier();

  // Start with the next owner so ranks spread their reads over different peers' buffers.
  for (int k = 1; k < n; ++k) {
    int s = (ctx.me + k) % n;
    auto [b, e] = slice_range(desc.count, n, s, elem);
    if (b == e) continue;
    std::memcpy(static_cast<std::byte*>(ctx.mine().out) + b * elem,
                static_cast<const std::byte*>(ctx.part(s).out) + b * elem, (e - b) * elem);
  }
  ctx.barrier();
}

}  // namespace dt::threads
