#include "dtensor/comm/symmetric_arena.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "dtensor/core/error.h"

namespace dt {

namespace {
size_t align_up(size_t n) { return (n + SymmetricArena::kAlignment - 1) / SymmetricArena::kAlignment * SymmetricArena::kAlignment; }
}  // namespace

SymmetricArena::SymmetricArena(int world_size, size_t bytes_per_rank)
    : capacity_(align_up(bytes_per_rank)), cursor_(size_t(world_size), 0), index_(size_t(world_size), 0) {
  if (world_size < 1) DT_THROW(ValueError) << "symmetric arena needs at least one rank, got " << world_size;
  const size_t total = std::max<size_t>(capacity_ * size_t(world_size), kAlignment);
  memory_ = std::shared_ptr<std::byte>(static_cast<std::byte*>(std::aligned_alloc(kAlignment, total)),
                                       [](std::byte* p) { std::free(p); });
  if (!memory_) DT_THROW(CommError) << "cannot allocate a symmetric arena of " << total << " bytes";
  std::memset(memory_.get(), 0, total);
  for (int r = 0; r < world_size; ++r) regions_.push_back(memory_.get() + capacity_ * size_t(r));
}

void SymmetricArena::begin_iteration(int rank) {
  DT_CHECK(rank >= 0 && rank < world_size()) << rank;
  cursor_[size_t(rank)] = 0;
  index_[size_t(rank)] = 0;
}

size_t SymmetricArena::record(int rank, size_t offset, size_t bytes) {
  if (offset + bytes > capacity_)
    DT_THROW(CommError) << "symmetric arena full: rank " << rank << " needs " << bytes << " bytes at offset " << offset
                        << " of " << capacity_;
  const size_t k = index_[size_t(rank)]++;
  std::lock_guard<std::mutex> lock(mu_);
  if (k == sequence_.size()) {
    sequence_.push_back({offset, bytes});
  } else if (sequence_[k].offset != offset) {
    DT_THROW(CommError) << "symmetric arena mismatch: rank " << rank << " buffer " << k << " is " << bytes
                        << " bytes at offset " << offset << ", but the agreed buffer is " << sequence_[k].bytes
                        << " bytes at offset " << sequence_[k].offset;
  }
  return offset;
}

size_t SymmetricArena::allocate(int rank, size_t bytes) {
  DT_CHECK(rank >= 0 && rank < world_size()) << rank;
  size_t offset = cursor_[size_t(rank)];
  record(rank, offset, bytes);
  cursor_[size_t(rank)] = align_up(offset + bytes);
  return offset;
}

size_t SymmetricArena::place(int rank, size_t offset, size_t bytes) {
  DT_CHECK(rank >= 0 && rank < world_size()) << rank;
  if (offset % kAlignment != 0) DT_THROW(ValueError) << "symmetric arena offset " << offset << " is not 64-byte aligned";
  return record(rank, offset, bytes);
}

Tensor SymmetricArena::tensor(int rank, size_t offset, DType dtype, const Shape& shape) const {
  const size_t bytes = size_t(numel(shape)) * itemsize(dtype);
  DT_CHECK(offset + bytes <= capacity_) << offset << " + " << bytes << " > " << capacity_;
  auto storage = Storage::wrap(base(rank) + offset, bytes, std::shared_ptr<void>(memory_, memory_.get()));
  return Tensor::from_storage(storage, dtype, shape, contiguous_strides(shape), 0);
}

}  // namespace dt
