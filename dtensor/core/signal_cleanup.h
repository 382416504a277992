// Paths removed when the process is ended by SIGINT, SIGTERM or SIGHUP: the temporaries of a
// StagedFiles set (core/atomic_file.h) and a sharded checkpoint's uncommitted generation, which
// would otherwise stay behind as hidden files of any size. The handler (installed on first use,
// only for signals whose disposition is still the default) unlinks every registered file, then
// removes the registered directories (rmdir: only when emptied), then lets the signal end the
// process as it would have.
// SIGKILL cannot be caught: what it leaves is removed by the next writer of the same directory.
#pragma once

#include <atomic>
#include <string>

namespace dt {

// Registers `path` (a file, or a directory emptied by removing the registered files); returns a
// slot for unregister_cleanup, or -1 when the table is full (the path is then not cleaned up).
//
// With a `guard` (shared by a group of paths, starting at 0), the handler removes the path only
// after moving the guard from 0 to 2 (abandoned); a writer about to commit the group moves it from
// 0 to 1 (claim_for_commit) and, failing, must not commit. So a signal racing a commit on another
// thread never removes what the commit makes live.
int register_cleanup(const std::string& path, std::atomic<int>* guard = nullptr);
// Moves `guard` from 0 to 1; false when the handler has abandoned the group.
inline bool claim_for_commit(std::atomic<int>& guard) {
  int open = 0;
  return guard.compare_exchange_strong(open, 1);
}
// Forgets a registered path (the file was committed or removed); -1 is ignored.
void unregister_cleanup(int slot);
// A signal that arrives while a guard is 1 (a commit in progress) is held back: the handler returns
// and the writer, once its commit is done (or failed) and its guard released, calls this to run the
// cleanup and end the process as the signal would have. No-op when no signal was held back.
void release_deferred_signal();

}  // namespace dt
