#include "dtensor/comm/mpi/all_reduce_shared.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "dtensor/comm/reduce_kernel.h"

namespace dt::mpi {

std::string_view shared_all_reduce_algorithm(size_t nbytes, const CommOptions& options) {
  return nbytes <= options.one_shot_threshold ? "shm_one_shot" : "shm_two_shot";
}

void all_reduce_shared(SharedArena& arena, void* buf, size_t count, DType dtype, ReduceOp op,
                       const CommOptions& options) {
  size_t item = itemsize(dtype), nbytes = count * item;
  Duration timeout = options.timeout;
  arena.reserve(nbytes, timeout);  // first, since it maps the segments
  int n = arena.size(), me = arena.me();
  uint64_t k = arena.next_op();
  arena.wait_for(ArenaCounter::done, k - 1, timeout);
  std::memcpy(arena.data(me), buf, nbytes);
  arena.signal(ArenaCounter::ready, k);
  arena.wait_for(ArenaCounter::ready, k, timeout);

  std::vector<const void*> inputs(static_cast<size_t>(n));
  if (shared_all_reduce_algorithm(nbytes, options) == "shm_one_shot") {
    for (int j = 0; j < n; ++j) inputs[size_t(j)] = arena.data(j);
    reduce_buffers(inputs.data(), n, buf, count, dtype, op);
    arena.signal(ArenaCounter::reduced, k);
    arena.signal(ArenaCounter::done, k);
    return;
  }
  size_t chunk = (count + size_t(n) - 1) / size_t(n);
  auto lo = [&](int i) { return std::min(count, size_t(i) * chunk); };
  auto hi = [&](int i) { return std::min(count, size_t(i + 1) * chunk); };
  for (int j = 0; j < n; ++j) inputs[size_t(j)] = arena.data(j) + lo(me) * item;
  // Writes chunk `me` of my own segment, which only I read in this phase (out aliases input me
  // at the same positions, which reduce_buffers allows).
  if (hi(me) > lo(me)) reduce_buffers(inputs.data(), n, arena.data(me) + lo(me) * item, hi(me) - lo(me), dtype, op);
  arena.signal(ArenaCounter::reduced, k);
  arena.wait_for(ArenaCounter::reduced, k, timeout);
  for (int j = 0; j < n; ++j)
    std::memcpy(static_cast<std::byte*>(buf) + lo(j) * item, arena.data(j) + lo(j) * item, (hi(j) - lo(j)) * item);
  arena.signal(ArenaCounter::done, k);
}

}  // namespace dt::mpi
