#include "dtensor/core/signal_cleanup.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace dt {
namespace {

// A fixed table of C strings owned by the table: the handler may only use async-signal-safe calls,
// so it reads the pointers without locks and never allocates.
constexpr int kSlots = 1024;
std::atomic<char*> g_paths[kSlots];
std::atomic<std::atomic<int>*> g_guards[kSlots];
std::atomic<int> g_high{0};  // one past the highest slot ever used
std::mutex g_mu;             // serialises registration (not the handler)
std::once_flag g_installed;
std::atomic<int> g_deferred{0};  // a signal held back while a guarded group was being committed

// Returns true when some guarded group is being committed (its guard is 1).
bool commit_in_progress() {
  for (int i = 0; i < g_high.load(); ++i)
    if (std::atomic<int>* guard = g_guards[i].load(); guard && g_paths[i].load() && guard->load() == 1) return true;
  return false;
}

void on_signal(int sig) {
  const int saved = errno;
  // A commit in progress on another thread finishes first (its writer then calls
  // release_deferred_signal): ending the process between its claim and its rename would leave a
  // complete generation that nothing names.
  if (commit_in_progress()) {
    g_deferred.store(sig);
    errno = saved;
    return;
  }
  // Files first, then the directories they were in (slots are reused, so not in order).
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < g_high.load(); ++i)
      if (char* p = g_paths[i].load()) {
        if (std::atomic<int>* guard = g_guards[i].load()) {
          int open = 0;
          if (!guard->compare_exchange_strong(open, 2) && open != 2) continue;  // being committed
        }
        pass == 0 ? ::unlink(p) : ::rmdir(p);
      }
  errno = saved;
  ::signal(sig, SIG_DFL);  // end the process as the signal would have
  ::raise(sig);
}

void install() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    if (old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) continue;  // someone else handles it
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // not SA_RESETHAND: a deferred signal keeps the handler for its release
    ::sigaction(sig, &sa, nullptr);
  }
}

}  // namespace

int register_cleanup(const std::string& path, std::atomic<int>* guard) {
  std::call_once(g_installed, install);
  std::lock_guard<std::mutex> lock(g_mu);
  for (int i = 0; i < kSlots; ++i) {
    if (g_paths[i].load()) continue;
    g_guards[i].store(guard);
    g_paths[i].store(::strdup(path.c_str()));
    if (i >= g_high.load()) g_high.store(i + 1);
    return i;
  }
  return -1;
}

void unregister_cleanup(int slot) {
  if (slot < 0 || slot >= kSlots) return;
  std::lock_guard<std::mutex> lock(g_mu);
  char* p = g_paths[slot].exchange(nullptr);
  std::free(p);
}

void release_deferred_signal() {
  if (const int sig = g_deferred.exchange(0)) on_signal(sig);
}

}  // namespace dt
