#include "dtensor/comm/mpi/shared_arena.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "dtensor/comm/backoff.h"
#include "dtensor/comm/collective_desc.h"
#include "dtensor/comm/mpi/mpi_runtime.h"
#include "dtensor/comm/timeout.h"

namespace dt::mpi {
namespace {

constexpr size_t kCacheLine = 64;
constexpr size_t kHeaderBytes = 4096;  // counters, padded so the data area is page aligned
constexpr size_t kMinCapacity = size_t(1) << 20;

}  // namespace

SharedArena::SharedArena(MPI_Comm node_comm, std::vector<int> global_ranks)
    : comm_(node_comm), global_ranks_(std::move(global_ranks)) {
  MPI_Comm_rank(comm_, &me_);
}

SharedArena::~SharedArena() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !comm_fault_happened()) free_window();
}

void SharedArena::free_window() {
  if (win_ == MPI_WIN_NULL) return;
  MpiCallGuard guard;
  MPI_Win_unlock_all(win_);
  MPI_Win_free(&win_);
  win_ = MPI_WIN_NULL;
}

void SharedArena::allocate(size_t capacity) {
  MpiCallGuard guard;
  MPI_Info info;
  MPI_Info_create(&info);
  // Let each segment live on its owner's NUMA node instead of one contiguous block.
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  void* mine = nullptr;
  int rc = MPI_Win_allocate_shared(MPI_Aint(kHeaderBytes + capacity), /*disp_unit=*/1, info, comm_,
                                   &mine, &win_);
  MPI_Info_free(&info);
  check_mpi(rc, fmt::format("MPI_Win_allocate_shared of {} bytes for group {}", capacity,
                            ranks_str(global_ranks_)));
  MPI_Win_lock_all(MPI_MODE_NOCHECK, win_);
  int n = 0;
  MPI_Comm_size(comm_, &n);
  base_.assign(size_t(n), nullptr);
  data_.assign(size_t(n), nullptr);
  for (int i = 0; i < n; ++i) {
    MPI_Aint size = 0;
    int disp = 0;
    void* base = nullptr;
    check_mpi(MPI_Win_shared_query(win_, i, &size, &disp, &base), "MPI_Win_shared_query");
    base_[size_t(i)] = static_cast<std::byte*>(base);
    data_[size_t(i)] = base_[size_t(i)] + kHeaderBytes;
  }
  // Counters continue from op_ and phase_ (the same on every member), so publish them as already
  // reached. The memory is not zeroed: nobody may read a counter before its owner initialized it.
  counter_ref(me_, ArenaCounter::phase).store(phase_, std::memory_order_release);
  counter_ref(me_, ArenaCounter::done).store(op_, std::memory_order_release);
  check_mpi(MPI_Barrier(comm_), "MPI_Barrier after allocating the shared arena");
  capacity_ = capacity;
}

void SharedArena::reserve(size_t bytes, Duration timeout) {
  if (bytes <= capacity_ && win_ != MPI_WIN_NULL) return;
  // Agree on the size first (non-blocking, under the timeout) so that the blocking window calls
  // below run only once every member is here.
  uint64_t want = std::max<uint64_t>(bytes, kMinCapacity), agreed = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  {
    MpiCallGuard guard;
    check_mpi(MPI_Iallreduce(&want, &agreed, 1, MPI_UINT64_T, MPI_MAX, comm_, &request),
              "MPI_Iallreduce of the shared arena size");
  }
  auto deadline = deadline_after(timeout);
  Backoff backoff;
  for (int done = 0; !done;) {
    {
      MpiCallGuard guard;
      check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test of the shared arena size");
    }
    if (!done && std::chrono::steady_clock::now() > deadline) {
      DT_THROW(CommError) << fmt::format(
          "shared-memory arena growth to {} bytes on group {} timed out after {} ms on rank {}",
          want, ranks_str(global_ranks_), timeout.count(), global_ranks_[size_t(me_)]);
    }
    if (!done) backoff.pause();
  }
  // Before freeing, every member must be done reading the old window: they all are, because they
  // all reached the size agreement after finishing their previous operation.
  free_window();
  allocate(size_t(agreed));
}

std::atomic_ref<uint64_t> SharedArena::counter_ref(int member, ArenaCounter counter) const {
  auto* p = reinterpret_cast<uint64_t*>(base_[size_t(member)] + size_t(counter) * kCacheLine);
  return std::atomic_ref<uint64_t>(*p);
}

void SharedArena::signal(ArenaCounter counter, uint64_t op) {
  counter_ref(me_, counter).store(op, std::memory_order_release);
}

void SharedArena::wait_for(ArenaCounter counter, uint64_t op, Duration timeout) {
  int n = size();
  auto deadline = deadline_after(timeout);
  Backoff backoff;
  for (uint64_t iter = 0;; ++iter) {
    int behind = 0;
    for (int i = 0; i < n; ++i) behind += counter_ref(i, counter).load(std::memory_order_acquire) < op;
    if (behind == 0) return;
    if ((iter & 255) == 255) {
      if (std::chrono::steady_clock::now() > deadline) break;
      backoff.pause();
      // Poke MPI's progress engine: a peer may be waiting for one of our non-blocking operations.
      int flag = 0;
      MpiCallGuard guard;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE);
    }
  }
  std::vector<int> lagging;
  std::string details;
  static const char* names[] = {"phase", "done"};
  for (int i = 0; i < n; ++i) {
    uint64_t at = counter_ref(i, counter).load(std::memory_order_acquire);
    if (at < op) {
      lagging.push_back(global_ranks_[size_t(i)]);
      details += fmt::format("{}rank {} at {}", details.empty() ? "" : "; ",
                             global_ranks_[size_t(i)], at);
    }
  }
  throw ArenaTimeout(fmt::format("shared-memory {} {}: ranks {} behind ({})", names[int(counter)], op,
                                 ranks_str(lagging), details));
}

}  // namespace dt::mpi
