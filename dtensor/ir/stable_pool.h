// StablePool<T>: owns objects of type T in chunks that never move, so a T* stays valid until the
// pool is destroyed (moving the pool moves the chunks, not the objects). The graph keeps its nodes
// and values here instead of one heap allocation each: parsing a 48k-node file made ~100k small
// allocations for them alone. Objects are never freed one by one; the pool is the graph's arena.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace dt::ir {

template <typename T>
class StablePool {
 public:
  StablePool() = default;
  // A moved-from pool is empty and usable (the graph's defaulted moves rely on this).
  StablePool(StablePool&& o) noexcept
      : chunks_(std::move(o.chunks_)), used_(std::exchange(o.used_, 0)), capacity_(std::exchange(o.capacity_, 0)) {
    o.chunks_.clear();
  }
  StablePool& operator=(StablePool&& o) noexcept {
    chunks_ = std::move(o.chunks_);
    o.chunks_.clear();
    used_ = std::exchange(o.used_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
    return *this;
  }

  // Returns a value-initialized T whose address is stable for the pool's life.
  T* make() {
    if (used_ == capacity_) grow();
    return &chunks_.back()[used_++];
  }

 private:
  // Chunks double from 32 to 1024 objects: small graphs stay small, large ones allocate rarely.
  void grow() {
    capacity_ = std::clamp<size_t>(capacity_ * 2, 32, 1024);
    chunks_.push_back(std::make_unique<T[]>(capacity_));
    used_ = 0;
  }

  std::vector<std::unique_ptr<T[]>> chunks_;
  size_t used_ = 0;      // objects handed out from the last chunk
  size_t capacity_ = 0;  // size of the last chunk
};

}  // namespace dt::ir
