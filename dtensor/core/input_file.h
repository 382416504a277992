// Opening a user's input file for reading: every reader of a path the user names (IR, plans,
// safetensors) goes through open_input_file, so that a FIFO, a device or a directory is refused
// at once with an IoError instead of blocking forever in open() or read().
#pragma once

#include <string>
#include <string_view>

namespace dt {

// An open, read-only file descriptor of a regular file; closed by the destructor.
class InputFile {
 public:
  // Opens `path` and checks it is a regular file; throws IoError "cannot open <what> <path>: ..."
  // or "<what> <path> is not a regular file (a fifo)". `what` names the file's role ("IR file").
  InputFile(const std::string& path, std::string_view what);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int fd() const { return fd_; }
  // Returns the file's size when it was opened.
  size_t size() const { return size_; }
  // Reads exactly `n` bytes at `offset` into `dst`; throws IoError when the file is shorter now
  // (it was truncated while being read) or the read fails.
  void read_exactly(void* dst, size_t n, size_t offset) const;

 private:
  std::string path_;
  std::string what_;
  int fd_ = -1;
  size_t size_ = 0;
};

// Returns the whole content of the regular file `path` (see InputFile for the errors).
std::string read_input_file(const std::string& path, std::string_view what);

}  // namespace dt
