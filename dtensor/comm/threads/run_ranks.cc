// run_ranks: one thread per rank over a shared World.
//
// Each rank thread runs fn on its world group; an exception marks the rank failed (peers waiting
// for it fail at once). Then the rank's progress threads drain and the rank is marked exited, so a
// peer still waiting for a collective it never issued fails at once too. The first root-cause
// failure is rethrown after every rank has joined.
#include "dtensor/comm/threads/run_ranks.h"

#include <fmt/format.h>

#include <numeric>
#include <system_error>
#include <thread>

#include "dtensor/comm/threads/threads_process_group.h"

namespace dt {

void run_ranks(int n, const std::function<void(ProcessGroup& world)>& fn, const CommOptions& options) {
  if (n < 1) DT_THROW(ValueError) << "run_ranks needs at least 1 rank, got " << n;
  auto world = std::make_shared<threads::World>(n, options);
  std::vector<int> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);

  auto rank_main = [&](int rank) {
    try {
      threads::ThreadsProcessGroup pg(world, world->endpoint(all, rank));
      fn(pg);
    } catch (const std::system_error& e) {
      // A thread (the rank's progress thread, a kernel pool's) could not be created: a user's
      // limit (ulimit -v, -u) or a mesh too large for the machine, not a bug.
      world->mark_failed(rank, std::make_exception_ptr(ValueError(fmt::format(
                                   "rank {} of {}: {} (run fewer ranks or threads, or raise ulimit -u / -v)", rank, n,
                                   e.what()))));
    } catch (...) {
      world->mark_failed(rank, std::current_exception());
    }
    world->drain_rank(rank);
    world->mark_exited(rank);
  };
  std::vector<std::thread> threads;
  threads.reserve(size_t(n));
  std::string start_error;
  for (int r = 0; r < n; ++r) {
    try {
      threads.emplace_back(rank_main, r);
    } catch (const std::system_error& e) {
      // The ranks not started fail at once, so the started ones stop waiting for them; then
      // every started thread is joined (a std::thread destroyed unjoined would abort).
      start_error = fmt::format("cannot start the thread of rank {} of {}: {} (run fewer ranks or threads, or raise "
                                "ulimit -u / -v)", r, n, e.what());
      for (int q = r; q < n; ++q) {
        world->mark_failed(q, std::make_exception_ptr(ValueError(start_error)));
        world->mark_exited(q);
      }
      break;
    }
  }
  for (std::thread& t : threads) t.join();
  if (!start_error.empty()) throw ValueError(start_error);
  if (std::exception_ptr error = world->root_cause()) std::rethrow_exception(error);
}

}  // namespace dt
