// Threads inside a rank: a small pool per calling thread and parallel_for over index ranges.
//
// Every rank thread (and the main thread of a single-rank run) lazily owns one ThreadPool of
// threads_per_rank() - 1 workers; the caller itself runs tasks too. The threads backend with R
// ranks and --threads N therefore runs R x N threads, each pool private to its rank, so ranks never
// wait on one another's pool (OpenBLAS's shared pthread server would serialise them).
//
// Results never depend on the thread count: kernels split a loop only over outputs computed
// independently (elements, rows, heads, GEMM row panels), never over the terms of one sum, so each
// output is computed by the same instructions in the same order whichever thread runs it. Tasks
// are claimed dynamically (which thread runs which range varies), which is harmless for the same
// reason. A parallel_for reached from inside a task (nested) runs serially on that thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dt {

// Sets the thread count of every rank's pool (n >= 1; ValueError otherwise). Pools of threads
// that already exist are resized at their next parallel_for. The default is 1 (no workers), so a
// library user or test that never calls this runs every kernel on the calling thread.
void set_threads_per_rank(int n);
int threads_per_rank();

// Returns max(1, hardware threads / ranks): the CLI's default for --threads.
int default_threads_per_rank(int ranks);

// A fixed set of worker threads that run the tasks of one run() at a time.
//
// A worker that finds no job spins for up to kSpin before it sleeps on the condition variable,
// and so does the caller waiting for the last task: a forward runs a parallel loop every few
// hundred microseconds, and waking a sleeping thread (a futex wake, then the scheduler) costs tens
// of microseconds on the critical path of every loop. Measured on the 4-layer Llama at two
// threads (dtensor profile): without the spin about 100 voluntary context switches per forward.
class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads - 1 workers; threads >= 1
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return int(workers_.size()) + 1; }
  // Calls task(i) once for every i in [0, tasks), on the workers and the caller, and returns when
  // all have finished. The first exception a task throws is rethrown here (the remaining tasks
  // still run to completion or throw too).
  void run(int64_t tasks, const std::function<void(int64_t)>& task);

 private:
  void work_loop();
  // Claims and runs tasks of the current job until none are left.
  void drain();
  // Waits up to kSpin for ready() to hold, without sleeping; returns ready().
  template <typename Ready>
  static bool spin(Ready ready);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t tasks_ = 0, next_ = 0, finished_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  // Mirrors of generation_ (bumped on stop too) and finished_, read without the lock while a
  // worker waits for the next job or the caller for the last task (spin).
  std::atomic<uint64_t> posted_{0};
  std::atomic<int64_t> finished_now_{0};
  std::exception_ptr error_;
};

namespace parallel_detail {
// The calling thread's pool at threads_per_rank() (created or resized here), or nullptr when the
// count is 1 or the caller is already inside a task.
ThreadPool* current_pool();
}  // namespace parallel_detail

// Calls f(begin, end) on disjoint ranges covering [0, n), each at least `grain` long (except when
// n < grain), at most threads_per_rank() x ranges_per_thread of them, near-equal in size. One
// range is a plain call on this thread: small loops pay nothing. Use ranges_per_thread > 1 when
// items differ in cost (causal attention blocks), so that threads that finish early take more.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f, int ranges_per_thread = 1) {
  if (n <= 0) return;
  ThreadPool* pool = n > grain ? parallel_detail::current_pool() : nullptr;
  const int64_t by_grain = (n + std::max<int64_t>(grain, 1) - 1) / std::max<int64_t>(grain, 1);
  const int64_t ranges = pool ? std::min<int64_t>(by_grain, int64_t(pool->threads()) * ranges_per_thread) : 1;
  if (ranges <= 1) {
    f(int64_t(0), n);
    return;
  }
  pool->run(ranges, [&](int64_t r) { f(n * r / ranges, n * (r + 1) / ranges); });
}

}  // namespace dt
