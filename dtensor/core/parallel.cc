#include "dtensor/core/parallel.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <system_error>
#include <utility>

#include "dtensor/core/error.h"

namespace dt {

namespace {
std::atomic<int> g_threads_per_rank{1};
// True on a pool worker, and on a caller while its pool runs a job: nested loops run serially.
thread_local bool t_in_task = false;
thread_local std::unique_ptr<ThreadPool> t_pool;
}  // namespace

void set_threads_per_rank(int n) {
  if (n < 1) DT_THROW(ValueError) << "thread count per rank must be at least 1, got " << n;
  g_threads_per_rank = n;
}

int threads_per_rank() { return g_threads_per_rank; }

int default_threads_per_rank(int ranks) {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(ranks, 1));
}

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) DT_THROW(ValueError) << "a thread pool needs at least 1 thread, got " << threads;
  workers_.reserve(size_t(threads - 1));
  // Workers never take SIGINT, SIGTERM or SIGHUP (they inherit the mask they are created with): a
  // process-directed signal goes to a thread that does not block it, preferring one that is
  // running, and a spinning worker often is. The cleanup handler (signal_cleanup.h) must run on a
  // thread that is not meanwhile creating the files it removes, as the caller's thread is when it
  // takes the signal itself.
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  for (int i = 1; i < threads; ++i) {
    try {
      workers_.emplace_back([this] { work_loop(); });
    } catch (const std::system_error&) {
      break;  // no more threads (ulimit -u, -v): fewer workers; the caller runs tasks too
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// How long a waiting pool thread spins before it sleeps (ThreadPool).
constexpr std::chrono::microseconds kSpin{200};

template <typename Ready>
bool ThreadPool::spin(Ready ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  while (!ready()) {
    for (int i = 0; i < 64; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() > until) return ready();
  }
  return true;
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    posted_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  while (next_ < tasks_) {
    const int64_t i = next_++;
    const std::function<void(int64_t)>* task = task_;
    lock.unlock();
    std::exception_ptr err;
    try {
      (*task)(i);
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    if (err && !error_) error_ = err;
    finished_now_.store(++finished_, std::memory_order_release);
    if (finished_ == tasks_) done_.notify_all();
  }
}

void ThreadPool::work_loop() {
  t_in_task = true;
  uint64_t seen = 0;
  while (true) {
    spin([&] { return posted_.load(std::memory_order_acquire) != seen; });
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    lock.unlock();
    drain();
  }
}

void ThreadPool::run(int64_t tasks, const std::function<void(int64_t)>& task) {
  if (tasks <= 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = &task;
    tasks_ = tasks;
    next_ = 0;
    finished_ = 0;
    finished_now_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    ++generation_;
    posted_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  const bool was_in_task = t_in_task;
  t_in_task = true;
  drain();
  t_in_task = was_in_task;
  spin([&] { return finished_now_.load(std::memory_order_acquire) == tasks; });
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return finished_ == tasks_; });
  // Workers that woke late find next_ == tasks_ and go back to sleep without touching task_.
  tasks_ = 0;
  next_ = 0;
  task_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

namespace parallel_detail {

ThreadPool* current_pool() {
  const int n = g_threads_per_rank;
  if (n <= 1 || t_in_task) return nullptr;
  if (!t_pool || t_pool->threads() != n) t_pool = std::make_unique<ThreadPool>(n);
  return t_pool.get();
}

}  // namespace parallel_detail

}  // namespace dt
