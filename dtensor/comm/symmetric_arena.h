// A symmetric arena: one region of the same size per rank, in which the same sequence of
// allocations lands at the same offsets on every rank and in every iteration (the strictest
// requirement of comm-buffer registration: NVSHMEM / multicast need equal offsets, not just equal
// allocations). A peer's buffer is then addressable as peer_base + offset, which is what one-shot
// and two-shot algorithms read.
//
// Allocation is a bump allocator reset by begin_iteration(); a buffer plan (dtensor/passes
// buffer_planner.h) gives the offsets directly so that buffers with disjoint lifetimes share
// space. Each rank records its (offset, bytes) sequence per iteration; the first rank to allocate
// the k-th buffer of an iteration fixes its offset, and any rank or iteration that puts its k-th
// buffer at a different offset fails with CommError instead of silently breaking symmetry. Sizes
// may differ between ranks (uneven shards: the plan reserves the largest at that offset).
//
// Thread safety: each rank uses only its own region and cursor; the shared sequence is guarded.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"
#include "dtensor/core/tensor.h"

namespace dt {

class SymmetricArena {
 public:
  static constexpr size_t kAlignment = 64;

  SymmetricArena(int world_size, size_t bytes_per_rank);

  int world_size() const { return int(regions_.size()); }
  size_t capacity() const { return capacity_; }

  // Starts a new iteration for `rank`: its cursor goes back to 0.
  void begin_iteration(int rank);
  // Returns the offset of `rank`'s next buffer of `bytes` (bump allocation, 64-byte aligned);
  // throws CommError when the arena is full or the sequence differs from the agreed one.
  size_t allocate(int rank, size_t bytes);
  // Returns the offset `offset` (from a buffer plan) after checking it fits; records it in the
  // sequence like allocate().
  size_t place(int rank, size_t offset, size_t bytes);

  // Returns rank's region base; peer buffers are base(peer) + offset.
  std::byte* base(int rank) const { return regions_[size_t(rank)]; }
  // Returns a tensor viewing `rank`'s region at `offset` (no copy; the arena owns the memory).
  Tensor tensor(int rank, size_t offset, DType dtype, const Shape& shape) const;

 private:
  struct Slot {
    size_t offset, bytes;
  };
  size_t record(int rank, size_t offset, size_t bytes);

  size_t capacity_;
  std::shared_ptr<std::byte> memory_;
  std::vector<std::byte*> regions_;
  std::vector<size_t> cursor_;  // bytes used in the current iteration, per rank
  std::vector<size_t> index_;   // buffers allocated in the current iteration, per rank
  std::mutex mu_;
  std::vector<Slot> sequence_;  // the agreed (offset, bytes) of the k-th buffer of an iteration
};

}  // namespace dt
