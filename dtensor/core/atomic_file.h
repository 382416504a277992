// Writing output files so that a reader only ever sees the old file or the complete new one.
//
// Every file dtensor writes (IR, safetensors, shard directories, traces, reports, flight recorder
// dumps) goes through StagedFiles (or write_file_atomically, a set of one): each file is written
// to a temporary name in its final directory (`.rank2.safetensors.dtensor-tmp-<pid>-<n>`),
// fsynced, and only when every file of the set is written are they renamed into place. A failure
// part-way (an unwritable target, a full disk, an exception, SIGKILL) leaves the previous files
// untouched and nothing under a final name; the destructor removes the temporaries of a set that
// was not committed (after SIGKILL a hidden temporary can remain, never a partial final file).
//
// Renaming never truncates an existing file in place, so a reader that has the old file open
// keeps reading the old content. An existing target that is not a regular file (a terminal, a
// pipe, /dev/null) cannot be replaced by rename and is written directly instead. A replaced file
// keeps its owner (when the writer may set it) and permissions. SIGINT/TERM/HUP remove the
// temporaries (core/signal_cleanup.h).
//
// An output path that is a symbolic link to a regular file (or to nothing) is refused: writing
// would replace the link's target, wherever it points. follow_output_symlinks() (the
// DTENSOR_FOLLOW_SYMLINKS=1 environment variable, or set_follow_output_symlinks) allows it: the
// target is then replaced and the link kept.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dt {

class StagedFiles {
 public:
  StagedFiles() = default;
  ~StagedFiles();  // removes the temporaries unless commit() ran
  StagedFiles(const StagedFiles&) = delete;
  StagedFiles& operator=(const StagedFiles&) = delete;

  // Writes `bytes` to a temporary next to `path` (its directory must exist); throws IoError
  // naming `path` when it cannot be written or `path` is a directory or is listed twice.
  void add(const std::string& path, std::string_view bytes);
  // Renames every temporary onto its final name; throws IoError when a rename fails.
  void commit();

 private:
  struct Staged {
    std::string path;  // final name
    std::string temp;  // "" when written directly (non-regular target)
    int cleanup_slot = -1;  // core/signal_cleanup.h: the temporary is removed on SIGINT/TERM
  };
  std::vector<Staged> files_;
  bool committed_ = false;
};

// Whether a symlinked output is written through (replacing its target) rather than refused.
bool follow_output_symlinks();
void set_follow_output_symlinks(bool follow);

// Writes one file atomically (see StagedFiles).
void write_file_atomically(const std::string& path, std::string_view bytes);

// Returns whether `a` and `b` name the same file: same device and inode when both exist, else
// the same absolute normalised path.
bool same_file(const std::string& a, const std::string& b);

// Throws IoError "<output> is the same file as <role> <input>" when output names one of `inputs`
// ((role, path) pairs; empty paths are skipped): dtensor never writes over a file it reads.
void refuse_output_over_input(const std::string& output,
                              const std::vector<std::pair<std::string, std::string>>& inputs);

}  // namespace dt
