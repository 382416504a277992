// Paths removed when the process is ended by SIGINT, SIGTERM or SIGHUP: the temporaries of a
// StagedFiles set (core/atomic_file.h) and a sharded checkpoint's uncommitted generation, which
// would otherwise stay behind as hidden files of any size. The handler (installed on first use,
// only for signals whose disposition is still the default) unlinks every registered file, then
// removes the registered directories (rmdir: only when emptied), then lets the signal end the
// process as it would have.
// SIGKILL cannot be caught: what it leaves is removed by the next writer of the same directory.
#pragma once

#include <string>

namespace dt {

// Registers `path` (a file, or a directory emptied by removing the registered files); returns a
// slot for unregister_cleanup, or -1 when the table is full (the path is then not cleaned up).
int register_cleanup(const std::string& path);
// Forgets a registered path (the file was committed or removed); -1 is ignored.
void unregister_cleanup(int slot);

}  // namespace dt
