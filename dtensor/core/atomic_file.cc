#include "dtensor/core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "dtensor/core/error.h"
#include "dtensor/core/signal_cleanup.h"

namespace dt {
namespace {

namespace fs = std::filesystem;

std::atomic<bool> g_follow_symlinks{false};

// Writes all of `bytes` to fd; returns 0 or the errno of the failure.
int write_all(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    done += size_t(n);
  }
  return 0;
}

// Returns the directory holding `path` ("." for a bare file name).
std::string parent_dir(const std::string& path) {
  fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// Makes the renames in `dir` durable; best effort (some file systems refuse to fsync a directory).
void sync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

StagedFiles::~StagedFiles() {
  for (const Staged& f : files_) {
    if (!f.temp.empty()) ::unlink(f.temp.c_str());
    unregister_cleanup(f.cleanup_slot);
  }
}

bool follow_output_symlinks() {
  if (g_follow_symlinks) return true;
  const char* env = std::getenv("DTENSOR_FOLLOW_SYMLINKS");
  return env && *env && std::string_view(env) != "0";
}

void set_follow_output_symlinks(bool follow) { g_follow_symlinks = follow; }

void StagedFiles::add(const std::string& requested, std::string_view bytes) {
  DT_CHECK(!committed_) << "add after commit: " << requested;
  if (requested.empty()) DT_THROW(IoError) << "cannot write a file with an empty name";
  std::string path = requested;
  // A symlinked output: writing through it would replace whatever file it points at (a system
  // file, for a planted link), so it is refused unless the user asked to follow links. A link to
  // a terminal or pipe (/dev/stdout) is written through: it holds nothing to replace.
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    std::error_code ec;
    fs::path target = fs::canonical(path, ec);
    struct stat tst {};
    const bool special = !ec && ::stat(target.c_str(), &tst) == 0 && !S_ISREG(tst.st_mode) && !S_ISDIR(tst.st_mode);
    if (!special && !follow_output_symlinks())
      DT_THROW(IoError) << "output " << requested << " is a symbolic link" << (ec ? "" : " to " + target.string())
                        << ": remove it or set DTENSOR_FOLLOW_SYMLINKS=1 to replace its target";
    if (ec) DT_THROW(IoError) << "cannot write " << requested << ": it is a dangling symbolic link";
    path = target.string();
  }
  for (const Staged& f : files_)
    if (same_file(f.path, path)) DT_THROW(IoError) << "cannot write " << requested << " twice in one command";

  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) DT_THROW(IoError) << "cannot write " << requested << ": it is a directory";
  if (exists && ::access(path.c_str(), W_OK) != 0)
    DT_THROW(IoError) << "cannot write " << requested << ": " << std::strerror(errno);
  if (exists && !S_ISREG(st.st_mode)) {
    // A terminal, pipe or device cannot be renamed over; it holds no previous content to protect.
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) DT_THROW(IoError) << "cannot write " << requested << ": " << std::strerror(errno);
    int err = write_all(fd, bytes);
    ::close(fd);
    if (err) DT_THROW(IoError) << "cannot write " << requested << ": " << std::strerror(err);
    files_.push_back({path, ""});
    return;
  }

  static std::atomic<uint64_t> counter{0};
  const fs::path p(path);
  const std::string temp = (fs::path(parent_dir(path)) / (std::string(".") + p.filename().string() + ".dtensor-tmp-" +
                                                         std::to_string(::getpid()) + "-" +
                                                         std::to_string(counter.fetch_add(1))))
                               .string();
  // Registered before it is made, so that no moment leaves it on disk unregistered: a signal
  // between the open and the registration left it behind (and so its checkpoint generation's
  // directory, which the handler removes only once empty). Removing a name not yet made is harmless.
  const int slot = register_cleanup(temp);  // removed if SIGINT/TERM ends the process first
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    unregister_cleanup(slot);
    DT_THROW(IoError) << "cannot write " << requested << ": " << std::strerror(err);
  }
  // The replacement keeps the owner and permissions of the file it replaces (chown first: it may
  // clear set-id bits). Changing the owner needs privilege; without it the writer owns the file.
  if (exists) {
    if (::fchown(fd, st.st_uid, st.st_gid) != 0) (void)::fchown(fd, uid_t(-1), st.st_gid);
    ::fchmod(fd, st.st_mode & 07777);
  }
  int err = write_all(fd, bytes);
  if (!err && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (err) {
    ::unlink(temp.c_str());
    unregister_cleanup(slot);
    DT_THROW(IoError) << "cannot write " << requested << ": " << std::strerror(err);
  }
  files_.push_back({path, temp, slot});
}

void StagedFiles::commit() {
  DT_CHECK(!committed_) << "commit twice";
  std::set<std::string> dirs;
  for (Staged& f : files_) {
    if (f.temp.empty()) continue;
    if (::rename(f.temp.c_str(), f.path.c_str()) != 0)
      DT_THROW(IoError) << "cannot write " << f.path << ": " << std::strerror(errno);
    f.temp.clear();
    unregister_cleanup(f.cleanup_slot);  // after the rename: the temporary's name is then unused
    f.cleanup_slot = -1;
    dirs.insert(parent_dir(f.path));
  }
  committed_ = true;
  for (const std::string& dir : dirs) sync_dir(dir);
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  StagedFiles files;
  files.add(path, bytes);
  files.commit();
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ea, eb;
  fs::path ca = fs::weakly_canonical(fs::absolute(a, ea), ea);
  fs::path cb = fs::weakly_canonical(fs::absolute(b, eb), eb);
  if (ea || eb) return a == b;
  return ca == cb;
}

void refuse_output_over_input(const std::string& output,
                              const std::vector<std::pair<std::string, std::string>>& inputs) {
  if (output.empty()) return;
  for (const auto& [role, input] : inputs)
    if (!input.empty() && same_file(output, input))
      DT_THROW(IoError) << "output " << output << " is the same file as " << role << " " << input
                        << ": dtensor never overwrites its inputs";
}

}  // namespace dt
