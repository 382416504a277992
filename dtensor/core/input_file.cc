#include "dtensor/core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dtensor/core/error.h"

namespace dt {
namespace {

const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a fifo";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

InputFile::InputFile(const std::string& path, std::string_view what) : path_(path), what_(what) {
  // O_NONBLOCK: opening a FIFO that has no writer would otherwise block in open() itself, before
  // the type could be checked. It has no effect on reads of a regular file.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) DT_THROW(IoError) << "cannot open " << what << " " << path << ": " << std::strerror(errno);
  struct stat st {};
  if (fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    DT_THROW(IoError) << "cannot stat " << what << " " << path << ": " << std::strerror(err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    DT_THROW(IoError) << what << " " << path << " is not a regular file (" << file_type_name(st.st_mode) << ")";
  }
  size_ = size_t(st.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

void InputFile::read_exactly(void* dst, size_t n, size_t offset) const {
  auto* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd_, p + done, n - done, off_t(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) DT_THROW(IoError) << "cannot read " << what_ << " " << path_ << ": " << std::strerror(errno);
    if (got == 0)
      DT_THROW(IoError) << what_ << " " << path_ << " changed while being read: it ended at " << offset + done
                        << " bytes, expected " << offset + n;
    done += size_t(got);
  }
}

std::string read_input_file(const std::string& path, std::string_view what) {
  InputFile file(path, what);
  std::string text(file.size(), '\0');
  file.read_exactly(text.data(), text.size(), 0);
  return text;
}

}  // namespace dt
